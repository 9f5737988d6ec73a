package session

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"
)

// docs/protocol.md, Timeouts: a client that pipelines requests with long
// answers and reads none is cut once more than maxUnwritten bytes wait
// for its socket, long before the header timeout (an hour here), rather
// than the server holding every answer; the session lives on.
func TestUnreadAnswersCut(t *testing.T) {
	e := start(t, envOptions{cfg: Config{HeaderTimeout: time.Hour}})
	holders := e.hello(t, "holders")
	shared := func(fb *frameBuilder) { fb.u8(TagMode, 1) }
	text := strings.Repeat("n", 1000)
	for i := range 40 {
		owner := func(fb *frameBuilder) { fb.str(TagOwner, fmt.Sprint("o", i)) }
		holders.granted(holders.acquire("wide", shared, owner, note(text)))
	}
	c := e.hello(t, "reads-nothing")
	if tc, ok := c.c.(*net.TCPConn); ok {
		tc.SetReadBuffer(4096)
	}
	describe := func(fb *frameBuilder) { fb.str(TagKey, "wide") }
	var batch []byte
	for range 50 {
		c.id++
		batch = append(batch, frameOf(TypeDescribe, c.id, describe)...)
	}
	c.c.SetWriteDeadline(time.Now().Add(30 * time.Second))
	var err error
	for sent := 0; err == nil; sent++ {
		if sent > 10_000 {
			t.Fatal("500,000 DESCRIBEs of 40 holders written and the connection not cut")
		}
		_, err = c.c.Write(batch)
	}
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		t.Fatalf("the connection was not cut: %v", err)
	}
	if len(e.node.Snapshot().Sessions) != 2 {
		t.Fatal("cutting the connection ended its session")
	}
	holders.granted(holders.acquire("after"))
}
