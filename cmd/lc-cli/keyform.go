package main

import (
	"encoding/hex"
	"errors"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/spf13/cobra"
)

// Keys and sources are arbitrary bytes. This file holds the two ways they
// cross the command line: how keys prints them (displayKey), and how a
// command reads one back (keyInput).

// displayKey returns how keys and keys -d print a key or source: as it is
// when it is printable UTF-8 with no backslash, no double quote and no
// space at either end, and as a Go double-quoted string (strconv.Quote)
// otherwise, such as "\xff", "a\x00b" or "\\xff". A string printed as it
// is never begins with a double quote, so two different strings never
// print the same; parseDisplayed reverses it.
func displayKey(s string) string {
	if printsAsIs(s) {
		return s
	}
	return strconv.Quote(s)
}

// printsAsIs reports whether displayKey leaves s unquoted.
func printsAsIs(s string) bool {
	return s != "" && s[0] != ' ' && s[len(s)-1] != ' ' &&
		!strings.ContainsAny(s, `"\`) && printable(s)
}

// printable reports whether s is valid UTF-8 made only of runes that
// strconv.IsPrint accepts: letters, marks, numbers, punctuation, symbols
// and the ASCII space.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !strconv.IsPrint(r) {
			return false
		}
	}
	return true
}

// parseDisplayed returns the bytes that displayKey printed as arg. An
// argument in double quotes is unquoted by Go's rules; any other is taken
// as it is, but only if displayKey would print it so. That refuses an
// escape whose quotes the shell removed (a\x00b) instead of taking its
// backslash literally.
func parseDisplayed(arg string) (string, error) {
	if strings.HasPrefix(arg, `"`) {
		s, err := strconv.Unquote(arg)
		if err != nil {
			return "", errors.New(`not a valid Go string in double quotes, such as "a\x00b"`)
		}
		return s, nil
	}
	if arg != "" && !printsAsIs(arg) {
		return "", errors.New(`keys would print it quoted; write it in double quotes, inside single quotes for the shell, as in '"a\x00b"'`)
	}
	return arg, nil
}

// displayWidth is the number of terminal columns s takes: two for East
// Asian wide and fullwidth characters and most emoji, none for combining
// marks, one for anything else. It is an approximation of wcwidth(3) for
// the printable runes that displayKey emits.
func displayWidth(s string) int {
	n := 0
	for _, r := range s {
		switch {
		case unicode.In(r, unicode.Mn, unicode.Me, hangulJungseongJongseong):
		case unicode.Is(wideRunes, r):
			n += 2
		default:
			n++
		}
	}
	return n
}

// hangulJungseongJongseong are the medial vowels and final consonants of
// conjoining Hangul, which join the initial before them in one cell.
var hangulJungseongJongseong = &unicode.RangeTable{R16: []unicode.Range16{{Lo: 0x1160, Hi: 0x11ff, Stride: 1}}}

// wideRunes are the blocks a terminal shows two columns wide: Hangul
// initials and syllables, CJK radicals, kana, ideographs and Yi,
// compatibility and fullwidth forms, and the main emoji blocks.
var wideRunes = &unicode.RangeTable{
	R16: []unicode.Range16{
		{Lo: 0x1100, Hi: 0x115f, Stride: 1},
		{Lo: 0x2329, Hi: 0x232a, Stride: 1},
		{Lo: 0x2e80, Hi: 0x303e, Stride: 1},
		{Lo: 0x3040, Hi: 0xa4cf, Stride: 1},
		{Lo: 0xa960, Hi: 0xa97f, Stride: 1},
		{Lo: 0xac00, Hi: 0xd7a3, Stride: 1},
		{Lo: 0xf900, Hi: 0xfaff, Stride: 1},
		{Lo: 0xfe10, Hi: 0xfe19, Stride: 1},
		{Lo: 0xfe30, Hi: 0xfe6f, Stride: 1},
		{Lo: 0xff00, Hi: 0xff60, Stride: 1},
		{Lo: 0xffe0, Hi: 0xffe6, Stride: 1},
	},
	R32: []unicode.Range32{
		{Lo: 0x1b000, Hi: 0x1b2ff, Stride: 1},
		{Lo: 0x1f300, Hi: 0x1f64f, Stride: 1},
		{Lo: 0x1f680, Hi: 0x1f6ff, Stride: 1},
		{Lo: 0x1f900, Hi: 0x1f9ff, Stride: 1},
		{Lo: 0x20000, Hi: 0x2fffd, Stride: 1},
		{Lo: 0x30000, Hi: 0x3fffd, Stride: 1},
	},
}

// keyInput reads the one key, or source, of a command. Without flags the
// argument is its own bytes; --hex takes it as hex digits, two per byte;
// --quoted takes it as keys prints it. value holds the result once an Args
// check has decoded it.
type keyInput struct {
	hex    bool // --hex
	quoted bool // --quoted
	value  string
}

// addFlags registers --hex and --quoted on cmd; what ("key" or "key or
// source") names the argument in their help.
func (in *keyInput) addFlags(cmd *cobra.Command, what string) {
	fs := cmd.Flags()
	fs.BoolVar(&in.hex, "hex", false, "the "+what+" is hex digits, two per byte: ff00 is the bytes 0xff 0x00")
	fs.BoolVar(&in.quoted, "quoted", false, "the "+what+` is written as keys prints it: as is, or a Go string in double quotes such as "a\x00b"`)
	// decode refuses the pair first; this keeps completion from offering
	// the second flag.
	cmd.MarkFlagsMutuallyExclusive("hex", "quoted")
}

// decode returns the bytes arg stands for under the flags. Both flags at
// once, or an argument that is not valid in its form, is a usage error;
// what names the argument in it.
func (in *keyInput) decode(what, arg string) (string, error) {
	switch {
	case in.hex && in.quoted:
		return "", usagef("--hex and --quoted exclude each other: give the %s one way", what)
	case in.hex:
		b, err := hex.DecodeString(arg)
		if err != nil {
			return "", usagef("--hex %s %q: want hex digits, two per byte, such as ff00", what, arg)
		}
		return string(b), nil
	case in.quoted:
		s, err := parseDisplayed(arg)
		if err != nil {
			return "", usagef("--quoted %s %q: %v", what, arg, err)
		}
		return s, nil
	}
	return arg, nil
}

// setKey decodes arg as a key, checks it, and keeps it in value.
func (in *keyInput) setKey(arg string) error {
	key, err := in.decode("key", arg)
	if err != nil {
		return err
	}
	if err := checkKey(key); err != nil {
		return err
	}
	in.value = key
	return nil
}

// setSource decodes arg as a source, checks it, and keeps it in value.
func (in *keyInput) setSource(arg string) error {
	source, err := in.decode("source", arg)
	if err != nil {
		return err
	}
	if err := checkSource(source); err != nil {
		return err
	}
	in.value = source
	return nil
}

// oneKey is the Args check of the commands that take exactly one key.
func (in *keyInput) oneKey(cmd *cobra.Command, args []string) error {
	if len(args) != 1 {
		return usagef("%s takes one key, got %d arguments (see lc-cli %s --help)", cmd.Name(), len(args), cmd.Name())
	}
	return in.setKey(args[0])
}

// encode writes s as the flags say an argument is written, for
// completion. Without flags, a key that would not survive a completion
// line (control bytes, invalid UTF-8) is left out: ok is false.
func (in *keyInput) encode(s string) (arg string, ok bool) {
	switch {
	case in.hex:
		return hex.EncodeToString([]byte(s)), true
	case in.quoted:
		return displayKey(s), true
	}
	return s, printable(s)
}
