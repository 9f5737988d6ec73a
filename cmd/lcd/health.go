package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/spf13/cobra"
)

// defaultHealthTimeout bounds one health probe: connect, request and the
// status line of the answer.
const defaultHealthTimeout = 5 * time.Second

// healthOptions are the flags of lcd health.
type healthOptions struct {
	url     string        // metrics endpoint to probe; empty derives it from the environment
	timeout time.Duration // bound of the whole probe
}

// newHealthCommand returns `lcd health`: one GET of the metrics endpoint,
// exit 0 when it answers 200 OK and exit 1 otherwise, with one line on
// stderr saying why. It needs no shell and no HTTP client in the image, so
// a container HEALTHCHECK can run it directly.
//
// Without --url the endpoint is found as the server finds it: the
// METRICS_ADDRESS variable, else BIND_ADDRESS's port+2, else
// 127.0.0.1:22121. An unspecified host (":22121", "0.0.0.0", "::") is
// probed on loopback.
func newHealthCommand(ctx context.Context, environ []string) *cobra.Command {
	var opts healthOptions
	cmd := &cobra.Command{
		Use:   "health",
		Short: "Probe the metrics endpoint of a running lcd; exit 0 when it answers 200",
		Long: "health sends one GET to the metrics endpoint and exits 0 on 200 OK, 1 otherwise.\n\n" +
			"Without --url the address comes from METRICS_ADDRESS, else BIND_ADDRESS's port+2,\n" +
			"else 127.0.0.1:22121; an unspecified host is probed on loopback.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if opts.timeout <= 0 {
				return &exitError{code: exitUsage, err: errors.New("health: timeout must be above zero")}
			}
			url := opts.url
			if url == "" {
				var err error
				if url, err = healthURL(environ); err != nil {
					return &exitError{code: exitUsage, err: fmt.Errorf("health: %w", err)}
				}
			}
			if err := probe(ctx, url, opts.timeout); err != nil {
				return &exitError{code: exitRuntime, err: fmt.Errorf("health: %w", err)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&opts.url, "url", "",
		"metrics endpoint to probe (default: from METRICS_ADDRESS or BIND_ADDRESS, else http://127.0.0.1:22121/metrics)")
	cmd.Flags().DurationVar(&opts.timeout, "timeout", defaultHealthTimeout, "bound of the whole probe")
	return cmd
}

// healthURL derives the metrics URL from the environment the way the
// server derives its metrics address. Errors: an address that does not
// parse, or a port of 0, which names no endpoint that could be probed.
func healthURL(environ []string) (string, error) {
	bind, metrics := defaultBindAddress, ""
	for _, kv := range environ {
		k, v, _ := strings.Cut(kv, "=")
		switch k {
		case "BIND_ADDRESS":
			bind = v
		case "METRICS_ADDRESS":
			metrics = v
		}
	}
	_, addr, _, err := sideAddresses(bind, "", metrics, "", true) // the HTTP API does not matter here
	if err != nil {
		return "", err
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("metrics address %q: %w", addr, err)
	}
	if port == "0" {
		return "", fmt.Errorf("metrics address %q: port 0 is chosen at start-up; pass --url", addr)
	}
	switch host {
	case "", "0.0.0.0":
		host = "127.0.0.1"
	case "::":
		host = "::1"
	}
	return "http://" + net.JoinHostPort(host, port) + "/metrics", nil
}

// probe GETs url once, bounded by timeout, and reports anything but
// 200 OK as an error. Proxy variables are ignored: a probe goes straight
// to the server.
func probe(ctx context.Context, url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return fmt.Errorf("url %q: %w", url, err)
	}
	client := &http.Client{Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
