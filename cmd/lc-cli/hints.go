package main

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// probeTimeout bounds each look at a port that cut a request off or did
// not answer it.
const probeTimeout = time.Second

// portKind is what a port turned out to speak when looked at.
type portKind int

const (
	portUnknown     portKind = iota // it took the connection and said nothing telling
	portUnreachable                 // it takes no connection
	portTLS                         // it completes a TLS handshake
	portHTTP                        // it answers HTTP
	portPlain                       // it answers, in the clear, neither TLS nor HTTP
)

// probePort looks at the port at addr: a TLS handshake (no certificate
// checked: only whether the port speaks TLS), then, when that told
// nothing, an HTTP request on a connection of its own.
func probePort(addr string) portKind {
	d := net.Dialer{Timeout: probeTimeout}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		return portUnreachable
	}
	c.SetDeadline(time.Now().Add(probeTimeout))
	tc := tls.Client(c, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS12})
	err = tc.Handshake()
	c.Close()
	var record tls.RecordHeaderError
	switch {
	case err == nil:
		return portTLS
	case errors.As(err, &record) && bytes.HasPrefix(record.RecordHeader[:], []byte("HTTP/")):
		return portHTTP
	case errors.As(err, &record) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET):
		return portPlain // a TLS server answers a hello; this one closed instead
	}
	if c, err = d.Dial("tcp", addr); err != nil {
		return portUnknown
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(probeTimeout))
	var answer [5]byte
	if _, err := io.WriteString(c, "HEAD / HTTP/1.0\r\n\r\n"); err == nil {
		if _, err := io.ReadFull(c, answer[:]); err == nil && string(answer[:]) == "HTTP/" {
			return portHTTP
		}
	}
	return portUnknown
}

// certificateSeen records what the servers asked of lc-cli's client
// certificate, for the hint of a handshake they refused.
type certificateSeen struct {
	asked    atomic.Bool // a server asked for a client certificate
	mismatch atomic.Bool // ... and named CAs that did not sign --tls-cert, which was sent all the same
}

// offer makes cfg present cert, when not nil, to every server that asks
// for a client certificate, whichever CAs it names (the TLS stack would
// send none to a server whose CAs did not sign it: the server's answer,
// "certificate required", would then hide the certificate's fault), and
// records what the servers asked in seen.
func (seen *certificateSeen) offer(cfg *tls.Config, cert *tls.Certificate) {
	cfg.GetClientCertificate = func(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
		seen.asked.Store(true)
		if cert == nil {
			return &tls.Certificate{}, nil
		}
		if cri.SupportsCertificate(cert) != nil {
			seen.mismatch.Store(true)
		}
		return cert, nil
	}
}

// hint adds to err, a failure, what lc-cli can tell of its cause: what a
// port that cut the request off or did not answer in time speaks (TLS
// where lc-cli spoke none, or the reverse; HTTP), a server that has
// stopped, a client certificate the server asked for or refused.
func (f *factory) hint(err error) error {
	speaksTLS := f.tls != nil
	var record tls.RecordHeaderError
	switch {
	case speaksTLS && errors.As(err, &record):
		return fmt.Errorf("%w (the port does not speak TLS: drop --tls and LC_TLS, or turn TLS on at the server)", err)
	case speaksTLS && f.certs.mismatch.Load():
		return fmt.Errorf("%w (the server asks for a client certificate signed by a CA of its TLS_CLIENT_CA_FILE, and no such CA signed --tls-cert)", err)
	case speaksTLS && f.certs.asked.Load() && f.global.TLS.CertFile == "":
		return fmt.Errorf("%w (the server requires a client certificate: give --tls-cert and --tls-key)", err)
	}
	cut := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET)
	if !cut && !errors.Is(err, os.ErrDeadlineExceeded) {
		return err
	}
	addrs, kinds := f.probe()
	if len(addrs) == 0 {
		return err
	}
	for i, k := range kinds {
		switch {
		case k == portTLS && !speaksTLS:
			return fmt.Errorf("%w (the port at %s speaks TLS: add --tls, and --tls-ca with its CA)", err, addrs[i])
		case k == portHTTP:
			return fmt.Errorf("%w (%s answers HTTP: it looks like lcd's HTTP API or metrics port, not its mutex or management port)", err, addrs[i])
		case k == portPlain && speaksTLS:
			return fmt.Errorf("%w (the port at %s does not speak TLS: drop --tls and LC_TLS, or turn TLS on at the server)", err, addrs[i])
		}
	}
	if cut && !slices.ContainsFunc(kinds, func(k portKind) bool { return k != portUnreachable }) {
		return fmt.Errorf("%w (the server closed the connection, and takes none now: it has stopped)", err)
	}
	return err
}

// probe looks at every port of the global flags at once, and returns
// them and what each speaks.
func (f *factory) probe() ([]string, []portKind) {
	var addrs []string
	for _, a := range append(splitAddresses(f.global.Address), f.managerAddrs...) {
		if !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
		}
	}
	kinds := make([]portKind, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() { kinds[i] = probePort(a) })
	}
	wg.Wait()
	return addrs, kinds
}
