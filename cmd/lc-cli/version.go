package main

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

type versionOptions struct {
	Stdout io.Writer
}

func newVersionCommand() *cobra.Command {
	opts := &versionOptions{}
	return &cobra.Command{
		Use:   "version",
		Short: "Print lc-cli's version and commit",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.Stdout = cmd.OutOrStdout()
			return runVersion(opts)
		},
	}
}

func runVersion(opts *versionOptions) error {
	_, err := fmt.Fprintf(opts.Stdout, "lc-cli %s (commit %s)\n", version, commit)
	return err
}
