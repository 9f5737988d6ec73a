package main

import (
	"context"
	"io"
	"os"
	"strconv"

	"github.com/locking-center/locking-center/manager"
	"github.com/spf13/cobra"
)

type sessionsOptions struct {
	Stdout  io.Writer
	Signals <-chan os.Signal
	Manager *managers
	Output  outputFormat // -o
}

func newSessionsCommand(f *factory) *cobra.Command {
	opts := &sessionsOptions{}
	cmd := &cobra.Command{
		Use:   "sessions",
		Short: "List the sessions of the session protocol",
		Long: `sessions prints the sessions that clients of the session protocol hold
open, one row each, sorted by id, from the management port:

  ID      the session's id
  NAME    the name its client gave (its source), printed as keys prints keys
  REMOTE  the address of its connection, - while none is attached (the
          client may resume it within its TTL)
  TTL     how long the server waits for a frame before it expires it
  IDLE    how long since the server last heard from it
  HELD    locks it holds
  PARKED  requests it has waiting

Like every command that does not wait for a key it gives up after
--timeout.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := f.managers()
			if err != nil {
				return err
			}
			opts.Stdout, opts.Signals, opts.Manager = cmd.OutOrStdout(), f.sys.Signals, m
			return runSessions(cmd.Context(), opts)
		},
	}
	addOutputFlag(cmd, &opts.Output, `{"sessions":[...]}`)
	return cmd
}

// jsonSession is a row of sessions in JSON.
type jsonSession struct {
	ID      *string `json:"id"`
	Name    *string `json:"name"` // null when empty or not UTF-8
	NameHex string  `json:"name_hex"`
	Remote  *string `json:"remote"` // null while no connection is attached
	TTLMS   int64   `json:"ttl_ms"`
	IdleMS  int64   `json:"idle_ms"`
	Held    int     `json:"held"`
	Parked  int     `json:"parked"`
}

func runSessions(ctx context.Context, opts *sessionsOptions) error {
	m := opts.Manager
	var ss []manager.Session
	err := interruptibly(ctx, opts.Signals, "list sessions at "+m.Addr(), func(ctx context.Context) (err error) {
		return m.atLeader(ctx, true, func(ctx context.Context, c *manager.Client) (err error) {
			ss, err = c.Sessions(ctx)
			return err
		})
	}, nil)
	if err != nil {
		return asFailure(err)
	}
	if opts.Output == outputJSON {
		out := struct {
			Sessions []jsonSession `json:"sessions"`
		}{Sessions: []jsonSession{}}
		for _, s := range ss {
			out.Sessions = append(out.Sessions, jsonSession{jsonID(s.ID), jsonOptional(s.Name), hexOf(s.Name),
				jsonOptional(s.RemoteAddr), jsonMillis(s.TTL), jsonMillis(s.Idle), s.Held, s.Parked})
		}
		return writeJSON(opts.Stdout, out)
	}
	t := table{
		header: []string{"ID", "NAME", "REMOTE", "TTL", "IDLE", "HELD", "PARKED"},
		right:  []bool{true, false, false, true, true, true, true},
	}
	for _, s := range ss {
		t.rows = append(t.rows, []string{
			strconv.FormatUint(s.ID, 10),
			cell(s.Name),
			cell(s.RemoteAddr),
			formatHeld(s.TTL),
			formatHeld(s.Idle),
			strconv.Itoa(s.Held),
			strconv.Itoa(s.Parked),
		})
	}
	_, err = io.WriteString(opts.Stdout, t.String())
	return err
}
