package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

type versionOptions struct {
	Stdout io.Writer
	Output outputFormat // -o
}

func newVersionCommand() *cobra.Command {
	opts := &versionOptions{}
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print lc-cli's version and commit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Stdout = cmd.OutOrStdout()
			return runVersion(opts)
		},
	}
	addOutputFlag(cmd, &opts.Output, `{"version":...,"commit":...}`)
	return cmd
}

func runVersion(opts *versionOptions) error {
	if opts.Output == outputJSON {
		return writeJSON(opts.Stdout, struct {
			Version string `json:"version"`
			Commit  string `json:"commit"`
		}{version, commit})
	}
	_, err := fmt.Fprintf(opts.Stdout, "lc-cli %s (commit %s)\n", version, commit)
	return err
}
