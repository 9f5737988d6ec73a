package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"os/exec"
	"strconv"

	"github.com/locking-center/locking-center/internal/bench/proc"
)

// releaseScript is the usual release of a Redis lock: delete the key only
// while it still holds this client's token.
const releaseScript = `if redis.call("get",KEYS[1]) == ARGV[1] then return redis.call("del",KEYS[1]) else return 0 end`

// startRedis runs redis-server on a free port of 127.0.0.1 with no
// persistence and waits for it to answer. It returns nil, after saying so,
// when the binary is not found; the Redis columns are then left empty.
func startRedis(bin string) *server {
	path, err := exec.LookPath(bin)
	if err != nil {
		log.Printf("%s not found (%v): the Redis columns are left empty; install the Debian package redis-server to fill them", bin, err)
		return nil
	}
	dir, err := os.MkdirTemp("", "lc-bench-redis")
	if err != nil {
		log.Fatal(err)
	}
	addr := proc.FreeAddrs(1)[0]
	cmd := exec.Command(path, "--bind", "127.0.0.1", "--port", proc.Port(addr), "--save", "", "--appendonly", "no",
		"--dir", dir, "--daemonize", "no", "--loglevel", "warning")
	cmd.Stderr = os.Stderr
	spawn(cmd)
	s := &server{cmd: cmd, addr: addr, dir: dir}
	proc.WaitListening(s.addr)
	c, err := dialRedis(s.addr)
	if err != nil {
		log.Fatalf("redis: %v", err)
	}
	defer c.c.Close()
	if s.sha, err = c.do("SCRIPT", "LOAD", releaseScript); err != nil {
		log.Fatalf("redis: SCRIPT LOAD: %v", err)
	}
	return s
}

// redisConn is a minimal client of RESP, the protocol of Redis: commands
// as arrays of bulk strings, replies read one at a time.
type redisConn struct {
	c   net.Conn
	r   *bufio.Reader
	buf []byte
}

func dialRedis(addr string) (*redisConn, error) {
	c, err := net.Dial("tcp", addr)
	if err != nil {
		return nil, err
	}
	return &redisConn{c: c, r: bufio.NewReaderSize(c, 512)}, nil
}

// do sends one command and returns its reply: a simple string, an
// integer or a bulk string as text, "(nil)" for a nil bulk string.
// Errors: the connection's, an error reply, or a reply of another type.
func (c *redisConn) do(args ...string) (string, error) {
	b := append(c.buf[:0], '*')
	b = strconv.AppendInt(b, int64(len(args)), 10)
	b = append(b, '\r', '\n')
	for _, a := range args {
		b = append(b, '$')
		b = strconv.AppendInt(b, int64(len(a)), 10)
		b = append(b, '\r', '\n')
		b = append(b, a...)
		b = append(b, '\r', '\n')
	}
	c.buf = b
	if _, err := c.c.Write(b); err != nil {
		return "", err
	}
	line, err := c.r.ReadSlice('\n')
	if err != nil {
		return "", err
	}
	line = bytes.TrimSuffix(line, []byte("\r\n"))
	if len(line) == 0 {
		return "", errors.New("redis: empty reply")
	}
	switch line[0] {
	case '+', ':':
		return string(line[1:]), nil
	case '-':
		return "", fmt.Errorf("redis: %s", line[1:])
	case '$':
		n, err := strconv.Atoi(string(line[1:]))
		if err != nil {
			return "", fmt.Errorf("redis: bulk length %q", line[1:])
		}
		if n < 0 {
			return "(nil)", nil
		}
		body := make([]byte, n+2)
		if _, err := io.ReadFull(c.r, body); err != nil {
			return "", err
		}
		return string(body[:n]), nil
	}
	return "", fmt.Errorf("redis: reply of type %q", line[0])
}

// redisClients opens the clients of a throughput round on Redis: each its
// own connection and key; a cycle is SET key token NX PX 30000, then the
// release script by EVALSHA, with a token new for each cycle.
func redisClients(s *server) func(i int) (func() error, func()) {
	return func(i int) (func() error, func()) {
		c, err := dialRedis(s.addr)
		if err != nil {
			log.Fatalf("redis: %v", err)
		}
		key := "bench/" + strconv.Itoa(i)
		prefix := "c" + strconv.Itoa(i) + "-"
		n := 0
		token := make([]byte, 0, 32)
		cycle := func() error {
			n++
			token = strconv.AppendInt(append(token[:0], prefix...), int64(n), 10)
			if r, err := c.do("SET", key, string(token), "NX", "PX", "30000"); err != nil || r != "OK" {
				return fmt.Errorf("redis SET NX: %q %v", r, err)
			}
			if r, err := c.do("EVALSHA", s.sha, "1", key, string(token)); err != nil || r != "1" {
				return fmt.Errorf("redis release: %q %v", r, err)
			}
			return nil
		}
		return cycle, func() { c.c.Close() }
	}
}
