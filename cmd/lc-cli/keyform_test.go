package main

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/locking-center/locking-center/manager"
)

func TestDisplayKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"orders/batch-7", "orders/batch-7"},
		{"with space", "with space"},
		{"línea", "línea"},
		{"日本", "日本"},
		{"-", "-"},
		{"'single'", "'single'"},
		{"", `""`},
		{"\xff", `"\xff"`},
		{`"\xff"`, `"\"\\xff\""`},
		{`\xff`, `"\\xff"`},
		{"a\x00b", `"a\x00b"`},
		{"a\nb", `"a\nb"`},
		{"tab\there", `"tab\there"`},
		{`back\slash`, `"back\\slash"`},
		{`say "hi"`, `"say \"hi\""`},
		{" lead", `" lead"`},
		{"trail ", `"trail "`},
		{"no\u00a0break", `"no\u00a0break"`},
		{"zero\u200bwidth", `"zero\u200bwidth"`},
	} {
		if got := displayKey(c.in); got != c.want {
			t.Errorf("displayKey(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

// displayCorpus is keys that are awkward to print: every single byte,
// escapes written out literally, quotes, spaces at the ends, wide and
// combining runes, and the longest key of all bytes 0..126.
func displayCorpus() []string {
	corpus := []string{
		`"\xff"`, `\xff`, `\`, `"`, `""`, `a"b`, `\n`, `"a\x00b"`,
		" lead", "trail ", " ", "a b", "日本", "e\u0301", "\u0301", "🙂",
		"\u00a0", "\u200b", "\ufffd", "\xed\xa0\x80", "a\x00b", "\r\n",
	}
	for b := range 256 {
		corpus = append(corpus, string([]byte{byte(b)}))
	}
	all := make([]byte, 127)
	for i := range all {
		all[i] = byte(i)
	}
	return append(corpus, string(all))
}

func TestDisplayKeyIsOneToOneAndParsesBack(t *testing.T) {
	printedAs := make(map[string]string)
	for _, k := range displayCorpus() {
		shown := displayKey(k)
		if strings.ContainsAny(shown, "\n\r\t") {
			t.Errorf("displayKey(%q) = %s spans more than a plain line", k, shown)
		}
		if other, dup := printedAs[shown]; dup && other != k {
			t.Errorf("%q and %q both print as %s", other, k, shown)
		}
		printedAs[shown] = k
		back, err := parseDisplayed(shown)
		if err != nil || back != k {
			t.Errorf("parseDisplayed(%s) = %q, %v; want %q", shown, back, err, k)
		}
	}
	if displayKey("\xff") == displayKey(`"\xff"`) {
		t.Errorf(`the byte 0xff and the 6 characters "\xff" print the same`)
	}
}

func FuzzDisplayKeyParsesBack(f *testing.F) {
	for _, k := range displayCorpus() {
		f.Add(k)
	}
	f.Fuzz(func(t *testing.T, k string) {
		shown := displayKey(k)
		if back, err := parseDisplayed(shown); err != nil || back != k {
			t.Fatalf("parseDisplayed(displayKey(%q)) = %q, %v", k, back, err)
		}
		if strings.ContainsAny(shown, "\n\r") {
			t.Fatalf("displayKey(%q) = %s holds a line break", k, shown)
		}
	})
}

func TestParseDisplayedRefusesWhatKeysNeverPrints(t *testing.T) {
	for _, arg := range []string{
		`a\x00b`,   // escapes whose quotes the shell removed
		`"a`,       // unterminated
		`"a"b`,     // text after the closing quote
		`"\q"`,     // no such escape
		"\"a\nb\"", // a raw line break inside the quotes
		" lead",    // keys would have quoted it
		"a\tb",
		"\xff",
	} {
		if got, err := parseDisplayed(arg); err == nil {
			t.Errorf("parseDisplayed(%q) = %q, want an error", arg, got)
		}
	}
}

func TestKeyInputDecode(t *testing.T) {
	for _, c := range []struct {
		hex, quoted bool
		arg, want   string
		bad         bool
	}{
		{arg: `"a\x00b"`, want: `"a\x00b"`},
		{arg: `a\x00b`, want: `a\x00b`},
		{hex: true, arg: "ff00", want: "\xff\x00"},
		{hex: true, arg: "FF0a", want: "\xff\n"},
		{hex: true, arg: "5c786666", want: `\xff`},
		{hex: true, arg: "f", bad: true},
		{hex: true, arg: "zz", bad: true},
		{hex: true, arg: "0xff", bad: true},
		{hex: true, arg: "ff 00", bad: true},
		{quoted: true, arg: `"a\x00b"`, want: "a\x00b"},
		{quoted: true, arg: `"\xff"`, want: "\xff"},
		{quoted: true, arg: `"\"\\xff\""`, want: `"\xff"`},
		{quoted: true, arg: `"\u00e9"`, want: "é"},
		{quoted: true, arg: "plain/key", want: "plain/key"},
		{quoted: true, arg: `a\x00b`, bad: true},
		{quoted: true, arg: `"open`, bad: true},
		{hex: true, quoted: true, arg: "ff", bad: true},
	} {
		in := &keyInput{hex: c.hex, quoted: c.quoted}
		got, err := in.decode("key", c.arg)
		var ue *usageError
		switch {
		case c.bad && !errors.As(err, &ue):
			t.Errorf("decode(hex=%v quoted=%v, %q) = %q, %v; want a usage error", c.hex, c.quoted, c.arg, got, err)
		case !c.bad && (err != nil || got != c.want):
			t.Errorf("decode(hex=%v quoted=%v, %q) = %q, %v; want %q", c.hex, c.quoted, c.arg, got, err, c.want)
		}
	}
}

func TestDisplayWidth(t *testing.T) {
	for s, want := range map[string]int{
		"":             0,
		"abc":          3,
		`"\xff"`:       6,
		"línea":        5,
		"日本":           4,
		"ｆｕｌｌ":         8,
		"e\u0301":      1,
		"한국":           4,
		"\u1100\u1161": 2, // conjoining Hangul: initial and medial in one cell
		"🙂":            2,
	} {
		if got := displayWidth(s); got != want {
			t.Errorf("displayWidth(%q) = %d, want %d", s, got, want)
		}
	}
}

func TestKeysDetailAlignsByDisplayWidth(t *testing.T) {
	at := time.Date(2026, 8, 27, 12, 0, 0, 0, time.UTC)
	var out strings.Builder
	err := writeHolders(&out, []manager.Holder{
		{Key: "日本語キー", Source: "-", RemoteAddr: "10.0.0.1:1", Acquired: at, Held: 5 * time.Second},
		{Key: "e\u0301", Acquired: at, Held: 61 * time.Second, Waiters: 12},
		{Key: "\xff", Source: "ops 日本語", RemoteAddr: "10.0.0.2:2", Acquired: at, Held: 3725 * time.Second},
	}, time.UTC)
	if err != nil {
		t.Fatal(err)
	}
	// The wide key and source are the widest cells of their columns; the
	// combining accent takes no column of its own.
	want := "" +
		"KEY         SOURCE      REMOTE      ACQUIRED                 HELD  WAITERS  TOKEN  SESSION  MODE       HOLDERS  LEASE  NOTE\n" +
		"日本語キー  \"-\"         10.0.0.1:1  2026-08-27 12:00:00      5.0s        0      0        -  exclusive        1      -  -\n" +
		"e\u0301           -           -           2026-08-27 12:00:00     1m01s       12      0        -  exclusive        1      -  -\n" +
		"\"\\xff\"      ops 日本語  10.0.0.2:2  2026-08-27 12:00:00  1h02m05s        0      0        -  exclusive        1      -  -\n"
	if out.String() != want {
		t.Errorf("keys -d printed\n%s\nwant\n%s", out.String(), want)
	}
}

// roundTripKeys are held at once in the round-trip test: 0x00, 0xff,
// line breaks, backslashes, quotes, spaces at the ends, the two keys that
// once printed alike, and the longest key of all bytes 0..126.
func roundTripKeys() []string {
	all := make([]byte, 127)
	for i := range all {
		all[i] = byte(i)
	}
	return []string{
		"\x00", "\xff", `"\xff"`, `\xff`, "\n", "a\nb", `\`, `"`, `a"b`,
		" lead", "trail ", "-", "-odd", "plain", "日本", "a\x00b", "\r",
		string(all),
	}
}

func TestKeysOutputResetsExactlyThatKeyWithQuoted(t *testing.T) {
	s := startServer(t, nil)
	keys := roundTripKeys()
	for _, k := range keys {
		s.hold(t, k, "round-trip")
	}
	r := runInProcess(t, s.environ(), "keys")
	if r.code != exitOK || r.stderr != "" {
		t.Fatalf("keys = %d %q", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if len(lines) != len(keys) {
		t.Fatalf("keys printed %d lines for %d keys:\n%s", len(lines), len(keys), r.stdout)
	}
	if got := strings.Count(r.stdout, "\"\\xff\"\n"); got != 1 {
		t.Errorf(`keys printed "\xff" on %d lines, want 1 (the byte 0xff only):`+"\n%s", got, r.stdout)
	}
	if !strings.Contains(r.stdout, "\"\\\"\\\\xff\\\"\"\n") {
		t.Errorf(`keys did not print the 6-character key "\xff" as "\"\\xff\""`+":\n%s", r.stdout)
	}
	remaining := len(keys)
	for _, line := range lines {
		before := s.holders(t)
		rr := runInProcess(t, s.environ(), "reset", "--quoted", "--", line)
		if rr.code != exitOK || rr.stdout+rr.stderr != "" {
			t.Fatalf("reset --quoted -- %s = %d %q %q", line, rr.code, rr.stdout, rr.stderr)
		}
		after := s.holders(t)
		remaining--
		if len(after) != remaining {
			t.Fatalf("reset --quoted -- %s left %d keys, want %d", line, len(after), remaining)
		}
		var gone []string
		for k := range before {
			if _, held := after[k]; !held {
				gone = append(gone, k)
			}
		}
		if len(gone) != 1 || displayKey(gone[0]) != line {
			t.Errorf("reset --quoted -- %s released %q", line, gone)
		}
	}
}

func TestHexAndQuotedNameTheKeyInEveryCommand(t *testing.T) {
	s := startServer(t, nil)
	env := append(s.environ(), "LC_SOURCE=bytes")
	run := func(args ...string) {
		t.Helper()
		if r := runInProcess(t, env, args...); r.code != exitOK || r.stdout+r.stderr != "" {
			t.Fatalf("%q = %d %q %q", args, r.code, r.stdout, r.stderr)
		}
	}
	held := func(key string, want bool) {
		t.Helper()
		if _, ok := s.holders(t)[key]; ok != want {
			t.Fatalf("%q held = %v, want %v", key, ok, want)
		}
	}

	run("trylock", "--hex", "00ff")
	held("\x00\xff", true)
	run("unlock", "--quoted", `"\x00\xff"`)
	held("\x00\xff", false)

	run("lock", "--quoted", `"a\x00"`)
	held("a\x00", true)
	run("lock", "--hex", "0a", "--", "true")
	held("\n", false)
	w := startInProcess(t, env, "wait", "--quoted", `"a\x00"`)
	s.waitWaiters(t, "a\x00", 1)
	run("reset", "--hex", "6100")
	if r := w.wait(t); r.code != exitOK || r.stderr != "" {
		t.Fatalf("wait --quoted = %d %q", r.code, r.stderr)
	}
	s.waitFree(t, "a\x00")

	s.hold(t, "k1", "src\x00")
	s.hold(t, "k2", "\xff")
	s.hold(t, "k3", `\xff`)
	run("reset", "-s", "--quoted", `"src\x00"`)
	held("k1", false)
	run("reset", "--hex", "-s", "ff")
	held("k2", false)
	held("k3", true)
	run("reset", "-s", `\xff`)
	held("k3", false)
}

func TestResetOfAFreeKeyOrIdleSourceSucceeds(t *testing.T) {
	s := startServer(t, nil)
	for _, args := range [][]string{{"reset", "never-held"}, {"reset", "-s", "holds-nothing"}} {
		if r := runInProcess(t, s.environ(), args...); r.code != exitOK || r.stdout+r.stderr != "" {
			t.Errorf("%q = %d %q %q, want 0 and no output", args, r.code, r.stdout, r.stderr)
		}
	}
}

func TestBadHexOrQuotedFailsWithoutContactingAServer(t *testing.T) {
	env, accepted := hangingUp(t)
	for _, c := range []struct {
		args []string
		says string
	}{
		{[]string{"lock", "--hex", "zz"}, "--hex"},
		{[]string{"lock", "--hex", "f", "--", "true"}, "--hex"},
		{[]string{"trylock", "--quoted", `a\x00b`}, "--quoted"},
		{[]string{"unlock", "--quoted", `"open`}, "--quoted"},
		{[]string{"wait", "--hex", "0xff"}, "--hex"},
		{[]string{"reset", "--quoted", `"\q"`}, "--quoted"},
		{[]string{"reset", "-s", "--hex", "gg"}, "source"},
		{[]string{"reset", "--hex", "--quoted", "00"}, "exclude"},
		{[]string{"trylock", "--quoted", "--hex", "00"}, "exclude"},
		{[]string{"reset", "--quoted", `""`}, "empty"},
		{[]string{"trylock", "--hex", ""}, "empty"},
		{[]string{"unlock", "--hex", strings.Repeat("00", 128)}, "too long"},
		{[]string{"reset", "-s", "--quoted", `"` + strings.Repeat(`\x00`, 128) + `"`}, "too long"},
	} {
		r := runInProcess(t, env, c.args...)
		if r.code != exitFailure {
			t.Errorf("%q = %d, want 2", c.args, r.code)
		}
		oneLine(t, r.stderr, c.says)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("bad arguments made %d connections, want none", n)
	}
}

func TestCompletionWritesKeysAsTheFlagsSay(t *testing.T) {
	s := startServer(t, nil)
	s.hold(t, "plain", "src\xff")
	s.hold(t, "\xff", "src\xff")
	for _, c := range []struct {
		args     []string
		want     []string
		unwanted []string
	}{
		{[]string{"unlock", ""}, []string{"plain\n"}, []string{"\xff"}},
		{[]string{"unlock", "--hex", ""}, []string{"706c61696e\n", "ff\n"}, nil},
		{[]string{"reset", "--quoted", ""}, []string{"plain\n", "\"\\xff\"\n"}, nil},
		{[]string{"reset", "-s", "--quoted", ""}, []string{"\"src\\xff\"\n"}, nil},
		{[]string{"reset", "-s", ""}, nil, []string{"src"}},
	} {
		r := runInProcess(t, s.environ(), append([]string{"__complete"}, c.args...)...)
		for _, w := range c.want {
			if !strings.Contains(r.stdout, w) {
				t.Errorf("completion of %q offers %q, want %q among them", c.args, r.stdout, w)
			}
		}
		for _, u := range c.unwanted {
			if strings.Contains(r.stdout, u) {
				t.Errorf("completion of %q offers %q, which holds %q", c.args, r.stdout, u)
			}
		}
	}
}

// TestKeysDetailQuotesASourceNamedDash keeps a source literally named "-"
// apart from an unknown one.
func TestKeysDetailQuotesASourceNamedDash(t *testing.T) {
	s := startServer(t, nil)
	s.hold(t, "k", "-")
	r := runInProcess(t, s.environ(), "keys", "-d")
	if rows := strings.Split(r.stdout, "\n"); r.code != exitOK || len(rows) != 3 || !strings.HasPrefix(rows[1], `k    "-"     127.0.0.1:`) {
		t.Errorf("keys -d = %d %q, printed\n%s\nwant the source shown as \"-\"", r.code, r.stderr, r.stdout)
	}
}
