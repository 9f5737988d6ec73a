package main

import (
	"crypto/tls"
	"crypto/x509"
	"os"
)

// tlsOptions are the global TLS flags.
type tlsOptions struct {
	On       bool   // --tls: TLS with the system's roots when no CA file is given
	CAFile   string // PEM CA certificates the server's certificate must chain to; set, TLS is on
	CertFile string // PEM client certificate (then intermediates); set, TLS is on
	KeyFile  string // PEM key of CertFile
	OldKey   bool   // KeyFile came as --key, the old name, which reads like a lock's key
}

// config returns the client TLS of the flags, or nil when they turn TLS
// off, and the client certificate, or nil when none is given. The server is verified against CAFile, else the system's roots, by
// the host of the address dialled. Errors (usage): a file that cannot be
// read or holds no certificate, a certificate without its key or a key
// without its certificate, a key that does not match.
func (o tlsOptions) config() (*tls.Config, *tls.Certificate, error) {
	if !o.On && o.CAFile == "" && o.CertFile == "" && o.KeyFile == "" {
		return nil, nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.CAFile != "" {
		b, err := os.ReadFile(o.CAFile)
		if err != nil {
			return nil, nil, usagef("--tls-ca: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(b) {
			return nil, nil, usagef("--tls-ca %s: no PEM certificate in the file", o.CAFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case o.CertFile != "" && o.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(o.CertFile, o.KeyFile)
		if err != nil {
			return nil, nil, usagef("--tls-cert %s and --tls-key %s: %v", o.CertFile, o.KeyFile, err)
		}
		cfg.Certificates = []tls.Certificate{cert}
		return cfg, &cert, nil
	case o.OldKey && o.CertFile == "":
		return nil, nil, usagef("--key is the TLS client key (now --tls-key), not a lock's key, and needs --tls-cert; " +
			"a lock's key is an argument: lc-cli lock KEY -- CMD")
	case o.CertFile != "" || o.KeyFile != "":
		return nil, nil, usagef("--tls-cert and --tls-key go together: give both, or neither")
	}
	return cfg, nil, nil
}
