package httpapi

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/locking-center/locking-center/mutex"
)

// appendEventJSON writes what json.Marshal writes, byte for byte: the
// fields in order, omitempty, every string escaped the same (HTML
// characters, U+2028 and U+2029, control bytes, invalid UTF-8), the time
// in UTC (zone 0, by way of the second kept from the input before) and
// in any other zone. The seed corpus is in testdata/fuzz/FuzzEventJSON;
// go test -fuzz FuzzEventJSON ./httpapi looks further.
func FuzzEventJSON(f *testing.F) {
	var ef eventFormat // one for every input, as for the events of a batch
	f.Fuzz(func(t *testing.T, id uint64, action, key string, token, session uint64, client, owner, note, mode, reason string,
		sec, nsec int64, zone int32) {
		at := time.Unix(sec, nsec).UTC()
		if zone != 0 {
			at = at.In(time.FixedZone("", int(zone)))
		}
		e := eventJSON{ID: id, Action: action, Key: key, FencingToken: token, Session: session, ClientID: client,
			Owner: owner, Note: note, Mode: mode, Reason: reason, Time: at}
		got := ef.appendEventJSON([]byte("data: "), &e)
		want, err := json.Marshal(&e)
		if err != nil {
			// A time Time.MarshalJSON refuses (a year outside 0..9999, a
			// zone 24 hours off or more): still JSON here.
			if !json.Valid(got[len("data: "):]) {
				t.Fatalf("%+v: %s is not JSON", e, got)
			}
			return
		}
		if !bytes.Equal(got, append([]byte("data: "), want...)) {
			t.Fatalf("%+v:\n got %s\nwant data: %s", e, got, want)
		}
	})
}

// appendSSE gives an event of the table the lines the stream carries:
// its id, and its data in the documented form, the time in UTC.
func TestAppendSSE(t *testing.T) {
	at := time.Date(2026, 12, 1, 11, 19, 10, 201825020, time.FixedZone("", 3600))
	var f eventFormat
	for _, c := range []struct {
		r    rawEvent
		want string
	}{
		{rawEvent{id: 1, client: "c1", ev: mutex.Event{Kind: mutex.EventGranted, Key: "orders/1", Token: 9, Session: 3, Source: "worker-1", At: at}},
			`{"id":1,"action":"acquired","key":"orders/1","fencing_token":9,"session":3,"client_id":"c1","owner":"worker-1","mode":"exclusive","time":"2026-12-01T10:19:10.20182502Z"}`},
		{rawEvent{id: 2, ev: mutex.Event{Kind: mutex.EventReleased, Reason: mutex.ReasonReleased, Key: "v1", Token: 9, Source: "10.0.0.4", At: at}},
			`{"id":2,"action":"released","key":"v1","fencing_token":9,"owner":"10.0.0.4","mode":"exclusive","reason":"released","time":"2026-12-01T10:19:10.20182502Z"}`},
		{rawEvent{id: 3, ev: mutex.Event{Kind: mutex.EventLost, Reason: mutex.ReasonLeaseExpired, Key: "<k>", Token: 9, Session: 3, Source: "w", Mode: mutex.Shared, At: at}},
			`{"id":3,"action":"expired","key":"\u003ck\u003e","fencing_token":9,"session":3,"owner":"w","mode":"shared","reason":"lease_expired","time":"2026-12-01T10:19:10.20182502Z"}`},
		{rawEvent{id: 4, ev: mutex.Event{Kind: mutex.EventWithdrawn, Reason: mutex.ReasonSessionExpired, Key: "k", Session: 3, Source: "w", At: at}},
			`{"id":4,"action":"withdrawn","key":"k","session":3,"owner":"w","mode":"exclusive","reason":"session_expired","time":"2026-12-01T10:19:10.20182502Z"}`},
	} {
		want := fmt.Sprintf("id: %d\ndata: %s\n\n", c.r.id, c.want)
		if got := string(f.appendSSE(nil, &c.r)); got != want {
			t.Errorf("event %d:\n got %q\nwant %q", c.r.id, got, want)
		}
	}
}

// BenchmarkEventFormat formats a typical event's lines for the stream,
// with the append-style formatter and with json.Marshal.
func BenchmarkEventFormat(b *testing.B) {
	r := rawEvent{seq: 1, id: 1796120347674003, ev: mutex.Event{Kind: mutex.EventGranted, Key: "bench/12",
		Token: 1796120347673685996, Session: 17, Source: "bench-12", At: time.Now()}}
	b.Run("append", func(b *testing.B) {
		var f eventFormat
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			buf = f.appendSSE(buf[:0], &r)
		}
	})
	b.Run("json.Marshal", func(b *testing.B) {
		buf := make([]byte, 0, 1024)
		for b.Loop() {
			e := eventOf(&r)
			data, _ := json.Marshal(&e)
			buf = append(append(append(fmt.Appendf(buf[:0], "id: %d", r.id), "\ndata: "...), data...), "\n\n"...)
		}
	})
}
