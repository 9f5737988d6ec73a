package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/locking-center/locking-center/auth"
	"github.com/spf13/cobra"
)

type tokenOptions struct {
	Stdout   io.Writer // the token alone, for a script to take
	Stderr   io.Writer // what to do with it, and the line of the tokens file
	Name     string
	Role     auth.Role
	Prefixes []string
	NewToken func() string
}

func newTokenCommand() *cobra.Command {
	opts := &tokenOptions{NewToken: auth.NewToken}
	var role string
	cmd := &cobra.Command{
		Use:   "token <name> [prefix...]",
		Short: "Make a new token and the line of the tokens file that grants it",
		Long: `token makes a new random token for the principal name and prints it
alone on stdout; on stderr it prints the line to add to lcd's tokens file
(AUTH_TOKENS_FILE): the name, the role and the token's SHA-256, so that
the file holds nothing a reader could connect with. After editing the
file, send lcd SIGHUP.

  LC_TOKEN=$(lc-cli token deployer deploy/ 2>>tokens-to-add)

--role client (the default) may lock keys in its own sessions; with
prefixes, only keys that start with one of them. --role admin may do
everything, and takes no prefixes. The token is printed once and kept
nowhere: give it to the client (LC_TOKEN for lc-cli). Nothing is sent to
a server.`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) < 1 {
				return usagef("token takes a name, then optionally key prefixes (see lc-cli token --help)")
			}
			opts.Name, opts.Prefixes = args[0], args[1:]
			r, ok := auth.ParseRole(role)
			if !ok {
				return usagef("token: --role %q: want client or admin", role)
			}
			opts.Role = r
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Stdout, opts.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			return runToken(opts)
		},
	}
	cmd.Flags().StringVar(&role, "role", "client", "client or admin")
	return cmd
}

func runToken(opts *tokenOptions) error {
	if opts.Role == auth.Admin && len(opts.Prefixes) > 0 {
		return usagef("token: an admin may use every key; give no prefixes with --role admin")
	}
	if strings.ContainsAny(opts.Name, " \t\r\n#") || opts.Name == "" || len(opts.Name) > 127 {
		return usagef("token: the name must be 1 to 127 bytes without spaces or #")
	}
	if len(opts.Prefixes) > 0 && (opts.Prefixes[0] == auth.Client.String() || opts.Prefixes[0] == auth.Admin.String()) {
		return usagef("token: %q would be a key prefix; give the role with --role %s", opts.Prefixes[0], opts.Prefixes[0])
	}
	for _, p := range opts.Prefixes {
		if strings.ContainsAny(p, " \t\r\n") || p == "" || len(p) > 127 {
			return usagef("token: a prefix must be 1 to 127 bytes without spaces")
		}
	}
	token := opts.NewToken()
	line := strings.Join(append([]string{opts.Name, opts.Role.String(), auth.HashToken(token)}, opts.Prefixes...), " ")
	if _, err := fmt.Fprintln(opts.Stdout, token); err != nil {
		return err
	}
	_, err := fmt.Fprintf(opts.Stderr, "# the token, on stdout, is for the client: it is kept nowhere else\n"+
		"# the line for the tokens file (then send lcd SIGHUP):\n%s\n", line)
	return err
}
