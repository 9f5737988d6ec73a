package main

import (
	"context"
	"os"
	"time"

	"github.com/locking-center/locking-center/manager"
	"github.com/spf13/cobra"
)

// completionTimeout bounds the manager query behind shell completion.
const completionTimeout = 2 * time.Second

type resetOptions struct {
	Signals  <-chan os.Signal
	Manager  *managers
	Arg      string // the key, or with BySource the source, decoded
	BySource bool   // -s: release everything Arg holds and withdraw its waiters
}

func newResetCommand(f *factory) *cobra.Command {
	opts := &resetOptions{}
	in := &keyInput{}
	cmd := &cobra.Command{
		Use:   "reset <key> | reset -s <source>",
		Short: "Take a key from its holder, or clear everything one source holds",
		Long: `reset <key> takes the key from its holder, whoever that is; the first
queued request, if any, gets it next.

reset -s <source> releases every key the source holds and withdraws every
request it has queued (those requests fail). Sources are what keys -d
shows in its SOURCE column; lc-cli sends lc-cli@<hostname> unless told
otherwise with --source.

Both go through the management port (--manager-address) and print
nothing on success. The server answers the same whether or not anything
matched: resetting a key nobody holds, or a source that holds nothing,
also exits 0.

A key or source with bytes that are awkward on a command line can be
given with --hex (ff00) or --quoted, as keys prints it ('"a\x00b"').`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return usagef("reset takes one key, or -s and one source, got %d arguments (see lc-cli reset --help)", len(args))
			}
			if opts.BySource {
				return in.setSource(args[0])
			}
			return in.setKey(args[0])
		},
		ValidArgsFunction: f.completeHeld(in, func() bool { return opts.BySource }),
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := f.managers()
			if err != nil {
				return err
			}
			opts.Signals = f.sys.Signals
			opts.Manager = m
			opts.Arg = in.value
			return runReset(cmd.Context(), opts)
		},
	}
	cmd.Flags().BoolVarP(&opts.BySource, "by-source", "s", false, "the argument is a source: clear everything it holds and has queued")
	in.addFlags(cmd, "key or source")
	return cmd
}

func runReset(ctx context.Context, opts *resetOptions) error {
	m := opts.Manager
	what, reset := describe("reset", opts.Arg, m.Addr()), (*manager.Client).ResetKey
	if opts.BySource {
		what, reset = describe("reset source", opts.Arg, m.Addr()), (*manager.Client).ResetSource
	}
	return asFailure(interruptibly(ctx, opts.Signals, what, func(ctx context.Context) error {
		return m.atLeader(ctx, false, func(ctx context.Context, c *manager.Client) error { return reset(c, ctx, opts.Arg) })
	}, nil))
}

// checkSource rejects a source that no holder can have.
func checkSource(source string) error {
	if source == "" {
		return usagef("source is empty: name a source as keys -d shows it")
	}
	return checkSourceLen(source)
}

// completeHeld returns the completion of a command's one argument: the
// held keys, or their sources when sources() says so, written as in's
// flags say. The global flags and variables pick the server; one that
// cannot be reached completes nothing.
func (f *factory) completeHeld(in *keyInput, sources func() bool) func(*cobra.Command, []string, string) ([]string, cobra.ShellCompDirective) {
	return func(cmd *cobra.Command, args []string, _ string) ([]string, cobra.ShellCompDirective) {
		none := cobra.ShellCompDirectiveNoFileComp
		if len(args) > 0 || f.resolve(cmd.Flags()) != nil {
			return nil, none
		}
		m, err := f.managers()
		if err != nil {
			return nil, none
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), completionTimeout)
		defer cancel()
		var names []string
		m.atLeader(ctx, true, func(ctx context.Context, c *manager.Client) error {
			if !sources() {
				var err error
				names, err = c.Keys(ctx)
				return err
			}
			holders, err := c.Holders(ctx)
			for _, h := range holders {
				names = append(names, h.Source)
			}
			return err
		})
		seen := make(map[string]bool)
		var out []string
		for _, name := range names {
			arg, ok := in.encode(name)
			if ok && name != "" && !seen[arg] {
				seen[arg] = true
				out = append(out, arg)
			}
		}
		return out, none
	}
}
