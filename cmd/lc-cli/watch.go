package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/spf13/cobra"
)

// eventLayout is how watch prints the time of an event: local date and
// 24-hour time to the millisecond, the precision of the server's.
const eventLayout = "2006-01-02 15:04:05.000"

type watchOptions struct {
	sessionRequest
	Stdout   io.Writer
	Prefix   string
	Output   outputFormat
	Location *time.Location // zone of the times; nil means time.Local
}

func newWatchCommand(f *factory) *cobra.Command {
	opts := &watchOptions{}
	var ttl time.Duration
	cmd := &cobra.Command{
		Use:   "watch [prefix]",
		Short: "Print what happens to the keys of a prefix, as it happens",
		Long: `watch opens a session on the mutex port (--address; a cluster's leader is
followed) and prints one line per event of every key that begins with
the prefix (every key without one), until interrupted:

  2026-08-27 12:00:21.042 acquired deploy/prod token=1787824751000000002 session=4 name=ci-job-4411

The types are acquired, released, expired, reset, withdrawn (a waiting
request left its queue without the key) and deadlock (an acquire refused
as it would close a cycle); token and session are 0 where there are
none (withdrawn, deadlock, v1), and an acquired event adds the holder's
note=, if any. A line "... gap" says the connection dropped and the
watch was set up again: events in between may be missing. Keys and
names are printed as keys prints them. With -o json each event is a JSON
object on a line of its own (docs/cli.md names the fields).

SIGINT, SIGTERM, SIGHUP or SIGQUIT end it with exit 128+N and no message.
A server that goes away and is not back within the session's TTL (--ttl),
nor another node of the cluster in its place, ends it with exit 2 and one
line on stderr.`,
		Args: func(_ *cobra.Command, args []string) error {
			switch {
			case len(args) > 1:
				return usagef("watch takes at most one prefix, got %d arguments (see lc-cli watch --help)", len(args))
			case len(args) == 1 && len(args[0]) > lockingcenter.MaxKeyLen:
				return usagef("prefix of %d bytes is too long: keys are at most %d bytes", len(args[0]), lockingcenter.MaxKeyLen)
			case len(args) == 1:
				opts.Prefix = args[0]
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			opts.sessionRequest = f.sessionRequest(opts.Prefix, ttl)
			opts.Stdout, opts.Location = cmd.OutOrStdout(), f.sys.Location
			return runWatch(cmd.Context(), opts)
		},
	}
	cmd.Flags().DurationVar(&ttl, "ttl", 0, "the session's TTL: how long a server may be gone before watch gives up (0: the server's default, 10s)")
	addOutputFlag(cmd, &opts.Output, "one JSON object per event, a line each")
	return cmd
}

func runWatch(ctx context.Context, opts *watchOptions) error {
	what := describe("watch", opts.Prefix, opts.Client.Addr())
	sess, err := opts.open(ctx, what)
	if err != nil {
		return asFailure(err)
	}
	defer sess.Close()
	var w *lockingcenter.Watcher
	err = interruptibly(ctx, opts.Signals, what, func(ctx context.Context) error {
		var err error
		w, err = sess.Watch(context.WithoutCancel(ctx), opts.Prefix)
		return err
	}, nil)
	if err != nil {
		return asFailure(err)
	}
	defer w.Close()
	loc := opts.Location
	if loc == nil {
		loc = time.Local
	}
	for {
		select {
		case sig := <-opts.Signals:
			return &exitError{code: signalCode(sig)}
		case ev, ok := <-w.Events():
			if !ok {
				return failure(fmt.Errorf("%s: %w", what, w.Err()))
			}
			if err := writeEvent(opts.Stdout, ev, opts.Output, loc); err != nil {
				return failure(fmt.Errorf("%s: write: %w", what, err))
			}
		}
	}
}

// jsonEvent is an event of watch -o json.
type jsonEvent struct {
	Type    string  `json:"type"`
	At      string  `json:"at"`
	Key     *string `json:"key"` // null for a gap, or a key that is not UTF-8
	KeyHex  string  `json:"key_hex"`
	Token   *string `json:"token"`   // null where there is none
	Session *string `json:"session"` // null for v1, and for a gap
	Name    *string `json:"name"`
	NameHex string  `json:"name_hex"`
	Note    *string `json:"note"`
}

// writeEvent prints ev as one line of text, or of JSON.
func writeEvent(w io.Writer, ev lockingcenter.Event, format outputFormat, loc *time.Location) error {
	if format == outputJSON {
		return writeJSON(w, jsonEvent{Type: ev.Type.String(), At: jsonTime(ev.At), Key: jsonOptional(ev.Key), KeyHex: hexOf(ev.Key),
			Token: jsonID(ev.Token), Session: jsonID(ev.Session), Name: jsonOptional(ev.Name), NameHex: hexOf(ev.Name),
			Note: jsonOptional(ev.Note)})
	}
	line := []string{ev.At.In(loc).Format(eventLayout), ev.Type.String()}
	if ev.Type != lockingcenter.EventGap {
		line = append(line, displayKey(ev.Key), "token="+strconv.FormatUint(ev.Token, 10),
			"session="+strconv.FormatUint(ev.Session, 10), "name="+cell(ev.Name))
		if ev.Note != "" {
			line = append(line, "note="+cell(ev.Note))
		}
	}
	_, err := fmt.Fprintln(w, strings.Join(line, " "))
	return err
}
