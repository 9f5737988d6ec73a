package main

import (
	"encoding/hex"
	"encoding/json"
	"io"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// outputFormat is the value of -o: how a command prints what it found.
type outputFormat string

const (
	outputText outputFormat = "text"
	outputJSON outputFormat = "json"
)

func (o *outputFormat) String() string { return string(*o) }
func (o *outputFormat) Type() string   { return "format" }

func (o *outputFormat) Set(v string) error {
	switch outputFormat(v) {
	case outputText, outputJSON:
		*o = outputFormat(v)
		return nil
	}
	return usagef("want text or json")
}

// addOutputFlag adds -o/--output to cmd; what names the JSON it prints.
func addOutputFlag(cmd *cobra.Command, o *outputFormat, what string) {
	*o = outputText
	cmd.Flags().VarP(o, "output", "o", "text, or json: "+what+" (docs/cli.md names the fields)")
	cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"text", "json"}, cobra.ShellCompDirectiveNoFileComp))
}

// writeJSON writes v as one JSON document on a line of its own.
func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// jsonText is a key, source or name in JSON: its text when it is UTF-8,
// else null; the _hex field beside it always has its bytes.
func jsonText(s string) *string {
	if !utf8.ValidString(s) {
		return nil
	}
	return &s
}

// jsonOptional is s, or null when it is empty (unknown).
func jsonOptional(s string) *string {
	if s == "" {
		return nil
	}
	return jsonText(s)
}

// jsonID is a token or session id in JSON: a decimal string, which no
// parser rounds (a token is above 2^53, the integers a double holds);
// null for 0, none.
func jsonID(v uint64) *string {
	if v == 0 {
		return nil
	}
	s := strconv.FormatUint(v, 10)
	return &s
}

// jsonMillis is d in whole milliseconds.
func jsonMillis(d time.Duration) int64 { return d.Milliseconds() }

// jsonTime is t in UTC, RFC 3339 with fractions of a second.
func jsonTime(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// hexOf is s's bytes in lowercase hex, as --hex reads them.
func hexOf(s string) string { return hex.EncodeToString([]byte(s)) }
