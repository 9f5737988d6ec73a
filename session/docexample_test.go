package session

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// docFrame is one frame (or the preface) of the Example of
// docs/protocol.md: its direction, its bytes, and the words beside them,
// one line for the header and one per field.
type docFrame struct {
	fromServer bool
	b          []byte
	words      []string
	line       int
}

// docExample reads the byte lines of the Example section of doc: a line
// beginning with → or ← starts a frame, an indented line goes on with it;
// each line is hex bytes, single-spaced, then two spaces or more and words.
func docExample(doc string) ([]docFrame, error) {
	at := strings.Index(doc, "\n### Example\n")
	if at < 0 {
		return nil, fmt.Errorf("no Example section")
	}
	rest := doc[at:]
	open := strings.Index(rest, "\n```\n")
	if open < 0 {
		return nil, fmt.Errorf("no code block in the Example")
	}
	rest = rest[open+5:]
	end := strings.Index(rest, "\n```")
	if end < 0 {
		return nil, fmt.Errorf("the Example's code block does not end")
	}
	firstLine := strings.Count(doc[:at+open+5], "\n") + 1
	var out []docFrame
	for i, line := range strings.Split(rest[:end], "\n") {
		var cur *docFrame
		switch {
		case strings.HasPrefix(line, "→ "), strings.HasPrefix(line, "← "):
			out = append(out, docFrame{fromServer: strings.HasPrefix(line, "←"), line: firstLine + i})
			line = line[len("→ "):]
		case strings.HasPrefix(line, "  ") && len(out) > 0:
			line = line[2:]
		default:
			return nil, fmt.Errorf("line %d: %q is neither a frame nor a field", firstLine+i, line)
		}
		cur = &out[len(out)-1]
		hexPart, words, ok := strings.Cut(line, "   ")
		if !ok {
			return nil, fmt.Errorf("line %d: no words after the bytes", firstLine+i)
		}
		b, err := hex.DecodeString(strings.ReplaceAll(strings.TrimSpace(hexPart), " ", ""))
		if err != nil || len(b) == 0 {
			return nil, fmt.Errorf("line %d: bytes %q: %v", firstLine+i, hexPart, err)
		}
		cur.b = append(cur.b, b...)
		cur.words = append(cur.words, strings.TrimSpace(words))
	}
	return out, nil
}

// checkWords checks what the words beside a frame's bytes say: the
// header's "TYPE, id N, M bytes of fields", and each field's tag name,
// followed by its value when it is a number or a quoted string. Each
// field must have a line of its own.
func checkWords(df docFrame, f *Frame, raw []byte) error {
	v := buildVectors()
	typeName, tagName := map[int]string{}, map[int]string{}
	for n, t := range v.Types {
		typeName[t] = strings.ToUpper(n)
	}
	for n, t := range v.Tags {
		tagName[t] = n
	}
	head := fmt.Sprintf("%s, id %d, %d bytes of fields:", typeName[int(f.Type)], f.ID, len(raw)-4-frameHeader)
	if df.words[0] != head {
		return fmt.Errorf("the header says %q, the bytes %q", df.words[0], head)
	}
	if len(df.words) != 1+len(f.Fields) {
		return fmt.Errorf("%d lines of fields for %d fields", len(df.words)-1, len(f.Fields))
	}
	for i, fl := range f.Fields {
		words := df.words[1+i]
		name, value, _ := strings.Cut(words, " ")
		name = strings.TrimSuffix(name, ":")
		if name != tagName[int(fl.Tag)] {
			return fmt.Errorf("field %d: the words name %q, the bytes %q", i+1, name, tagName[int(fl.Tag)])
		}
		switch {
		case strings.HasPrefix(value, `"`):
			q, err := strconv.QuotedPrefix(value)
			if err != nil {
				return fmt.Errorf("field %s: %q: %v", name, value, err)
			}
			if s, _ := strconv.Unquote(q); s != string(fl.Value) {
				return fmt.Errorf("field %s: the words say %s, the bytes %q", name, q, fl.Value)
			}
		case value != "" && value[0] >= '0' && value[0] <= '9':
			digits, _, _ := strings.Cut(value, ":")
			digits, _, _ = strings.Cut(digits, " ")
			n, err := strconv.ParseUint(digits, 10, 64)
			if err != nil || fixedSize[fl.Tag] == 0 || fl.Tag == TagSecret {
				return fmt.Errorf("field %s: %q is not the number of an integer field", name, value)
			}
			if n != beUint(fl.Value) {
				return fmt.Errorf("field %s: the words say %d, the bytes %d", name, n, beUint(fl.Value))
			}
		}
	}
	return nil
}

// variable are the fields of the Example whose values are the server's to
// choose: they are compared by tag only.
var variable = tagSet(TagSession, TagSecret, TagToken, TagServer)

// The Example of docs/protocol.md is true byte for byte and word for
// word: each frame is a frame of the vectors, its words say what its
// bytes say, and a server that is sent the client's frames answers with
// the server's frames (the session id, secret, token and server identity
// aside).
func TestProtocolDocExample(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join("..", "docs", "protocol.md"))
	if err != nil {
		t.Fatal(err)
	}
	frames, err := docExample(string(doc))
	if err != nil {
		t.Fatalf("docs/protocol.md: %v", err)
	}
	if len(frames) < 3 || string(frames[0].b) != Preface || frames[0].fromServer {
		t.Fatalf("docs/protocol.md: the Example does not begin with the preface and frames")
	}
	vectorHex := map[string]bool{}
	for _, vf := range buildVectors().Frames {
		vectorHex[vf.Hex] = true
	}
	parsed := make([]Frame, len(frames))
	for i, df := range frames[1:] {
		f := &parsed[i+1]
		n, err := ParseFrame(df.b, f)
		if err == nil && n != len(df.b) {
			err = fmt.Errorf("%d bytes after the frame", len(df.b)-n)
		}
		if err == nil {
			err = checkWords(df, f, df.b)
		}
		if err == nil && !vectorHex[hex.EncodeToString(df.b)] {
			err = fmt.Errorf("not a frame of %s", vectorsPath)
		}
		if err != nil {
			t.Errorf("docs/protocol.md:%d: %v", df.line, err)
		}
	}
	if t.Failed() {
		return
	}

	// Replay: the client's frames to a server, the server's compared.
	e := start(t, envOptions{cfg: Config{ServerID: "lcd 1.0.0"}})
	c := e.dial(t)
	for i, df := range frames[1:] {
		want := parsed[i+1]
		if !df.fromServer {
			c.write(df.b)
			continue
		}
		got := c.read()
		if err := sameFrame(got, want); err != nil {
			t.Errorf("docs/protocol.md:%d: the server sent another frame: %v", df.line, err)
		}
	}
}

// sameFrame compares a frame the server sent with one of the doc: type,
// id, the tags in order, and the values of all but the variable tags.
func sameFrame(got, want Frame) error {
	if got.Type != want.Type || got.ID != want.ID || len(got.Fields) != len(want.Fields) {
		return fmt.Errorf("type %#02x id %d with %d fields, want %#02x id %d with %d",
			uint8(got.Type), got.ID, len(got.Fields), uint8(want.Type), want.ID, len(want.Fields))
	}
	for i, fl := range want.Fields {
		g := got.Fields[i]
		if g.Tag != fl.Tag || !variable[fl.Tag] && !bytes.Equal(g.Value, fl.Value) {
			return fmt.Errorf("field %d: tag %#02x value %x, want tag %#02x value %x", i+1, g.Tag, g.Value, fl.Tag, fl.Value)
		}
		if variable[fl.Tag] && fixedSize[fl.Tag] != 0 && len(g.Value) != len(fl.Value) {
			return fmt.Errorf("field %d: %d bytes, want %d", i+1, len(g.Value), len(fl.Value))
		}
	}
	return nil
}
