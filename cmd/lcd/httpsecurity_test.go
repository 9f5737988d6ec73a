package main

import (
	"bufio"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// httpDo sends method path with body to the HTTP API at addr, with token
// as a bearer token when not empty, and returns the status and the body.
func httpDo(t *testing.T, addr, method, path, body, token string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, "http://"+addr+path, strings.NewReader(body))
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// The HTTP API of lcd with a tokens file: the probes are open, the API
// asks for a token and keeps to the prefixes, and a SIGHUP's new tokens
// take effect.
func TestHTTPAuthenticationEndToEnd(t *testing.T) {
	tokensPath := writeTokens(t, filepath.Join(t.TempDir(), "tokens"), "ops admin "+testOpsToken+"\n"+
		"deployer client "+testDeployerToken+" deploy/\n")
	p, addrs := startLCD(t, "", "AUTH_TOKENS_FILE="+tokensPath, "RATE_PER_SOURCE=1000")
	if code, _ := httpDo(t, addrs.HTTP, http.MethodGet, "/healthz", "", ""); code != http.StatusOK {
		t.Errorf("/healthz without a token: %d", code)
	}
	if code, body := httpDo(t, addrs.HTTP, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/a","owner":"w"}`, ""); code != http.StatusUnauthorized {
		t.Errorf("acquire without a token: %d %s", code, body)
	}
	if code, body := httpDo(t, addrs.HTTP, http.MethodPost, "/api/v1/locks/acquire", `{"key":"deploy/a","owner":"w"}`, testDeployerToken); code != http.StatusOK {
		t.Errorf("acquire with a token: %d %s", code, body)
	}
	if code, body := httpDo(t, addrs.HTTP, http.MethodPost, "/api/v1/locks/acquire", `{"key":"billing/a","owner":"w"}`, testDeployerToken); code != http.StatusForbidden {
		t.Errorf("acquire outside the prefixes: %d %s", code, body)
	}
	if code, body := httpDo(t, addrs.HTTP, http.MethodGet, "/api/v1/locks/metrics", "", testDeployerToken); code != http.StatusOK ||
		!strings.Contains(body, `locking_center_refusals_total{reason="unauthenticated"} 1`) ||
		!strings.Contains(body, `locking_center_refusals_total{reason="forbidden"} 1`) {
		t.Errorf("metrics on the HTTP port: %d\n%s", code, grepLines(body, "refusals"))
	}
	writeTokens(t, tokensPath, "ops admin "+testOpsToken+"\nnewbie client "+testNewbieToken+"\n")
	p.cmd.Process.Signal(syscall.SIGHUP)
	p.waitLog(t, "tokens file reloaded", 1)
	if code, _ := httpDo(t, addrs.HTTP, http.MethodGet, "/api/v1/locks/sessions", "", testNewbieToken); code != http.StatusOK {
		t.Errorf("a token added by the reload: %d", code)
	}
	if code, _ := httpDo(t, addrs.HTTP, http.MethodGet, "/api/v1/locks/sessions", "", testDeployerToken); code != http.StatusUnauthorized {
		t.Errorf("a token removed by the reload: %d", code)
	}
	if strings.Contains(p.log.String(), testDeployerToken) || strings.Contains(p.log.String(), testNewbieToken) {
		t.Error("a token reached the log")
	}
}

// The HTTP port shares the connection cap of the client ports: past it, a
// connection is answered 503 with Retry-After and closed, and counted; the
// metrics port answers from the reserve; once a connection closes, the
// API answers again.
func TestHTTPConnectionCap(t *testing.T) {
	_, addrs := startLCD(t, "", "MAX_CONNECTIONS=4", "RESERVED_CONNECTIONS=2")
	// Two keep-alive connections that each carried a request hold the two
	// places of the client ports.
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addrs.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		resp := rawGet(t, c, addrs.HTTP, "/healthz")
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("a request within the cap: %s", resp.Status)
		}
		held = append(held, c)
	}
	for i := range 3 {
		c, err := net.Dial("tcp", addrs.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		resp := rawGet(t, c, addrs.HTTP, "/api/v1/locks/observability")
		body, _ := io.ReadAll(resp.Body)
		c.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") != "1" ||
			resp.Header.Get("Content-Type") != "application/json" || !resp.Close ||
			!strings.Contains(string(body), `"code":"over_limit"`) {
			t.Fatalf("connection %d over the cap: %s %v %s", i, resp.Status, resp.Header, body)
		}
	}
	code, text := metricsText(t, addrs.Metrics, "/metrics", "")
	if code != http.StatusOK || !strings.Contains(text, `locking_center_refusals_total{reason="connections"} 3`) {
		t.Fatalf("metrics %d while the HTTP port is full:\n%s", code, grepLines(text, "refusals"))
	}
	held[0].Close()
	deadline := time.Now().Add(startTimeout)
	for {
		// Each try that finds the port full is refused at once.
		c, err := net.Dial("tcp", addrs.HTTP)
		if err != nil {
			t.Fatal(err)
		}
		resp := rawGet(t, c, addrs.HTTP, "/healthz")
		c.Close()
		if resp.StatusCode == http.StatusOK {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the HTTP port did not answer again once a connection closed")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// rawGet sends GET path on c and reads the answer's head.
func rawGet(t *testing.T, c net.Conn, host, path string) *http.Response {
	t.Helper()
	c.SetDeadline(time.Now().Add(startTimeout))
	if _, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: "+host+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode == http.StatusOK {
		io.Copy(io.Discard, resp.Body) // keep the connection usable
	}
	return resp
}
