package main

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// httpCycler runs acquire and release of one key of its own over lcd's
// HTTP API, one request at a time, in a session of its own (a client_id),
// on the keep-alive connections of a shared client.
type httpCycler struct {
	client          *http.Client
	acquire, relURL string
	body            []byte
	release         []byte // the release's body up to its fencing token
	buf             bytes.Buffer
}

// newHTTPClient returns a client whose transport keeps a connection alive
// for each of clients goroutines.
func newHTTPClient(clients int) *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConns:        clients * 2,
		MaxIdleConnsPerHost: clients * 2,
		IdleConnTimeout:     time.Minute,
		DisableCompression:  true,
	}}
}

// httpClients opens the clients of a throughput round on lcd's HTTP API
// at addr: each its own key and client_id.
func httpClients(client *http.Client, addr string) func(i int) (func() error, func()) {
	return func(i int) (func() error, func()) {
		id := strconv.Itoa(i)
		c := &httpCycler{client: client,
			acquire: "http://" + addr + "/api/v1/locks/acquire",
			relURL:  "http://" + addr + "/api/v1/locks/release",
			body:    []byte(`{"key":"bench/` + id + `","owner":"bench-` + id + `","client_id":"bench-` + id + `"}`),
			release: []byte(`{"key":"bench/` + id + `","owner":"bench-` + id + `","client_id":"bench-` + id + `","fencing_token":`),
		}
		return c.cycle, client.CloseIdleConnections
	}
}

// post sends body to url and returns the answer's body, which must be a
// 200.
func (c *httpCycler) post(url string, body []byte) ([]byte, error) {
	resp, err := c.client.Post(url, "application/json", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	c.buf.Reset()
	if _, err := c.buf.ReadFrom(resp.Body); err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s %s", url, resp.Status, c.buf.Bytes())
	}
	return c.buf.Bytes(), nil
}

var tokenField = []byte(`"fencing_token":`)

func (c *httpCycler) cycle() error {
	b, err := c.post(c.acquire, c.body)
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	// The fencing token's digits, without decoding the whole answer.
	at := bytes.Index(b, tokenField)
	if at < 0 {
		return fmt.Errorf("acquire: no fencing token in %s", b)
	}
	digits := b[at+len(tokenField):]
	end := bytes.IndexFunc(digits, func(r rune) bool { return r < '0' || r > '9' })
	if end <= 0 {
		return fmt.Errorf("acquire: fencing token in %s", b)
	}
	rel := append(append(c.release[:len(c.release):len(c.release)], digits[:end]...), '}')
	if _, err := c.post(c.relURL, rel); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return nil
}

// httpThroughput measures uncontended acquire+release cycles over lcd's
// HTTP API with keep-alive, beside the same lcd's session protocol and a
// Redis server's usual lock, in alternating rounds of one run, at each
// client count of -http-clients.
func httpThroughput(lcdBin, redisBin, beforeBin string) {
	lcd := startLCDWith(lcdBin, true)
	defer lcd.stop()
	redis := startRedis(redisBin)
	if redis != nil {
		defer redis.stop()
	}
	var before *server
	if beforeBin != "" {
		before = startLCDWith(beforeBin, true)
		defer before.stop()
	}
	var rows, vsBefore []string
	for _, clients := range httpClientCounts {
		client := newHTTPClient(clients)
		var hr, sr, rr, br, hc, sc, rc, bc []float64
		for range *rounds {
			if before != nil {
				b := driveWith(before, clients, httpClients(client, before.http))
				br, bc = append(br, b.perSec), append(bc, us(b.cpuCycle))
			}
			h := driveWith(lcd, clients, httpClients(client, lcd.http))
			hr, hc = append(hr, h.perSec), append(hc, us(h.cpuCycle))
			s := driveWith(lcd, clients, sessionClients(lcd.addr))
			sr, sc = append(sr, s.perSec), append(sc, us(s.cpuCycle))
			if redis != nil {
				r := driveWith(redis, clients, redisClients(redis))
				rr, rc = append(rr, r.perSec), append(rc, us(r.cpuCycle))
			}
		}
		rows = append(rows, fmt.Sprintf("| %d | %.0f | %.0f | %s | %.3f | %s | %.1f | %.1f | %s | %.3f | %s |", clients,
			median(hr), median(sr), medianOr(rr, "%.0f"), median(ratios(hr, sr)), ratioOr(hr, rr, "%.3f"),
			median(hc), median(sc), medianOr(rc, "%.1f"), median(ratios(hc, sc)), ratioOr(hc, rc, "%.3f")))
		if before != nil {
			vsBefore = append(vsBefore, beforeRow(clients, br, hr, bc, hc))
		}
	}
	fmt.Println("## Uncontended acquire+release over HTTP with keep-alive, beside the session protocol and Redis")
	fmt.Println()
	fmt.Println("| clients | HTTP cycles/s | session cycles/s | redis cycles/s | HTTP/session | HTTP/redis | HTTP CPU µs/cycle | session CPU µs/cycle | redis CPU µs/cycle | HTTP/session CPU | HTTP/redis CPU |")
	fmt.Println("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	fmt.Println(strings.Join(rows, "\n"))
	fmt.Println()
	if before != nil {
		beforeTable("Acquire+release over HTTP, lcd beside "+beforeBin, "HTTP ", vsBefore)
	}
}

// httpClientCounts are the client counts of http-throughput.
var httpClientCounts = []int{16}
