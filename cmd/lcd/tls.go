package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/locking-center/locking-center/internal/tlsconf"
)

// tlsOptions are the raw strings of the TLS settings.
type tlsOptions struct {
	cert, key, clientCA, sourceFromCert string
}

func (o *tlsOptions) settings() []setting {
	return []setting{
		{"tls-cert-file", "TLS_CERT_FILE", "", "PEM certificate (then intermediates) of the server; with tls-key-file, every port speaks TLS 1.2 or later; reloaded on SIGHUP", &o.cert},
		{"tls-key-file", "TLS_KEY_FILE", "", "PEM private key of tls-cert-file; reloaded on SIGHUP", &o.key},
		{"tls-client-ca-file", "TLS_CLIENT_CA_FILE", "", "PEM CA certificates of client certificates: the mutex, management and HTTP ports require one, the metrics port verifies one if given; reloaded on SIGHUP", &o.clientCA},
		{"tls-source-from-cert", "TLS_SOURCE_FROM_CERT", "false", "true: the source of every v1 lock and session is the client certificate's name (its common name, else its first DNS name); needs tls-client-ca-file", &o.sourceFromCert},
	}
}

// config returns the TLS settings, or nil when TLS_CERT_FILE and
// TLS_KEY_FILE are not set. The files are read at start (newTransport).
// clustered: NODE_ID is set.
func (o *tlsOptions) config(clustered bool) (*tlsconf.Config, error) {
	fromCert, err := strconv.ParseBool(o.sourceFromCert)
	if err != nil {
		return nil, fmt.Errorf("tls-source-from-cert %q: want true or false", o.sourceFromCert)
	}
	switch {
	case o.cert == "" && o.key == "":
		if o.clientCA != "" || fromCert {
			return nil, errors.New("TLS_CLIENT_CA_FILE and TLS_SOURCE_FROM_CERT need TLS_CERT_FILE and TLS_KEY_FILE")
		}
		return nil, nil
	case o.cert == "" || o.key == "":
		return nil, errors.New("TLS_CERT_FILE and TLS_KEY_FILE go together: set both, or neither")
	case fromCert && o.clientCA == "":
		return nil, errors.New("TLS_SOURCE_FROM_CERT needs TLS_CLIENT_CA_FILE: only a verified client certificate can name a source")
	case clustered:
		return nil, errors.New("TLS and NODE_ID: a cluster's nodes do not speak TLS to each other yet; unset the TLS_ settings or NODE_ID")
	}
	return &tlsconf.Config{CertFile: o.cert, KeyFile: o.key, ClientCAFile: o.clientCA, NamedClients: fromCert}, nil
}

// transport is the TLS of every port, or plain TCP when its store is nil.
type transport struct {
	store    *tlsconf.Store
	fromCert bool // TLS_SOURCE_FROM_CERT
}

// newTransport reads the TLS files of cfg; nil cfg: plain TCP. Errors: a
// file that cannot be read or does not parse, a key that does not match
// its certificate; each names its file.
func newTransport(cfg *tlsconf.Config) (*transport, error) {
	if cfg == nil {
		return &transport{}, nil
	}
	st, err := tlsconf.Load(*cfg)
	if err != nil {
		return nil, err
	}
	return &transport{store: st, fromCert: cfg.NamedClients}, nil
}

// port returns the tls.Config of a port that asks clients for what
// clients says (see tlsconf.Clients), offering the ALPN protocols protos;
// nil without TLS.
func (t *transport) port(clients tlsconf.Clients, protos ...string) *tls.Config {
	if t.store == nil {
		return nil
	}
	return t.store.Config(clients, protos...)
}

// listener returns ln under TLS with the config of a port that asks
// clients for what clients says; ln itself without TLS. The handshake
// is the work of the connection's goroutine (net/http's, bounded by its
// header timeout), never of Accept.
func (t *transport) listener(ln net.Listener, clients tlsconf.Clients, protos ...string) net.Listener {
	if t.store == nil {
		return ln
	}
	return tls.NewListener(ln, t.store.Config(clients, protos...))
}

// reload reads the TLS files again, on SIGHUP: new handshakes get their
// contents, connections open stay as they are. Files that do not parse
// leave those in force.
func (t *transport) reload(log *slog.Logger) {
	if t.store == nil {
		return
	}
	if err := t.store.Reload(); err != nil {
		log.Error("TLS files not reloaded; the certificate loaded before stays in force", slog.Any("error", err))
		return
	}
	c := t.store.Certificate()
	log.Info("TLS files reloaded", slog.String("subject", c.Subject.String()),
		slog.Time("not_after", c.NotAfter))
}
