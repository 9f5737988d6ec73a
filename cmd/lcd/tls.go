package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strconv"

	"github.com/locking-center/locking-center/cluster"
	"github.com/locking-center/locking-center/internal/tlsconf"
)

// tlsOptions are the raw strings of the TLS settings.
type tlsOptions struct {
	cert, key, clientCA, sourceFromCert string
	peerCert, peerKey, peerCA           string
}

func (o *tlsOptions) settings() []setting {
	return []setting{
		{"tls-cert-file", "TLS_CERT_FILE", "", "PEM certificate (then intermediates) of the server; with tls-key-file, every port speaks TLS 1.2 or later; reloaded on SIGHUP", &o.cert},
		{"tls-key-file", "TLS_KEY_FILE", "", "PEM private key of tls-cert-file; reloaded on SIGHUP", &o.key},
		{"tls-client-ca-file", "TLS_CLIENT_CA_FILE", "", "PEM CA certificates of client certificates: the mutex, management and HTTP ports require one, the metrics port verifies one if given; reloaded on SIGHUP", &o.clientCA},
		{"tls-source-from-cert", "TLS_SOURCE_FROM_CERT", "false", "true: the source of every v1 lock and session is the client certificate's name (its common name, else its first DNS name); needs tls-client-ca-file", &o.sourceFromCert},
		{"tls-peer-ca-file", "TLS_PEER_CA_FILE", "", "PEM CA certificates of the nodes' certificates: a cluster node under TLS requires one of every other node (cluster; needed with tls-cert-file); reloaded on SIGHUP", &o.peerCA},
		{"tls-peer-cert-file", "TLS_PEER_CERT_FILE", "", "PEM certificate this node presents to the other nodes, for server and client authentication (cluster; default: tls-cert-file); reloaded on SIGHUP", &o.peerCert},
		{"tls-peer-key-file", "TLS_PEER_KEY_FILE", "", "PEM private key of tls-peer-cert-file (cluster; default: tls-key-file); reloaded on SIGHUP", &o.peerKey},
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
	case fromCert && clustered:
		return nil, errors.New("TLS_SOURCE_FROM_CERT and NODE_ID: a follower forwards v1 requests to the leader under its own certificate, " +
			"whose name the leader would take as the source; unset TLS_SOURCE_FROM_CERT")
	}
	return &tlsconf.Config{CertFile: o.cert, KeyFile: o.key, ClientCAFile: o.clientCA, NamedClients: fromCert}, nil
}

// peer returns the TLS settings between the nodes of a cluster, or nil
// when the node speaks plain TCP to the others (no NODE_ID, or no
// TLS_CERT_FILE). Call it after config succeeded.
func (o *tlsOptions) peer(clustered bool) (*tlsconf.PeerConfig, error) {
	set := o.peerCA != "" || o.peerCert != "" || o.peerKey != ""
	switch {
	case set && !clustered:
		return nil, errors.New("TLS_PEER_CA_FILE, TLS_PEER_CERT_FILE and TLS_PEER_KEY_FILE are cluster settings: set NODE_ID too, or unset them")
	case !clustered:
		return nil, nil
	case set && o.cert == "":
		return nil, errors.New("TLS_PEER_ settings need TLS_CERT_FILE and TLS_KEY_FILE: a cluster's nodes speak TLS to each other only when they do to clients")
	case o.cert == "":
		return nil, nil
	case o.peerCA == "":
		return nil, errors.New("TLS_CERT_FILE and NODE_ID need TLS_PEER_CA_FILE: the CA certificates the nodes' certificates are verified against")
	case (o.peerCert == "") != (o.peerKey == ""):
		return nil, errors.New("TLS_PEER_CERT_FILE and TLS_PEER_KEY_FILE go together: set both, or neither (then TLS_CERT_FILE's serves)")
	}
	pc := &tlsconf.PeerConfig{CertFile: o.cert, KeyFile: o.key, CAFile: o.peerCA}
	if o.peerCert != "" {
		pc.CertFile, pc.KeyFile = o.peerCert, o.peerKey
	}
	return pc, nil
}

// transport is the TLS of every port, or plain TCP when its store is nil.
type transport struct {
	store    *tlsconf.Store
	peer     *tlsconf.Peer // a cluster node's TLS to the other nodes; nil: plain TCP
	fromCert bool          // TLS_SOURCE_FROM_CERT
}

// newTransport reads the TLS files of cfg and peer; nil cfg: plain TCP;
// nil peer: plain TCP between the nodes of a cluster. Errors: a file that
// cannot be read or does not parse, a key that does not match its
// certificate, a node certificate not good for both server and client
// authentication or not accepted by the peer CAs, or, with client CAs,
// not signed by one of them (a follower presents it to the leader's mutex
// port); each names its file.
func newTransport(cfg *tlsconf.Config, peer *tlsconf.PeerConfig) (*transport, error) {
	if cfg == nil {
		return &transport{}, nil
	}
	st, err := tlsconf.Load(*cfg)
	if err != nil {
		return nil, err
	}
	t := &transport{store: st, fromCert: cfg.NamedClients}
	if peer == nil {
		return t, nil
	}
	if t.peer, err = tlsconf.LoadPeer(*peer); err != nil {
		return nil, err
	}
	if err := st.AcceptsClient(t.peer.Chain()); err != nil {
		return nil, fmt.Errorf("TLS node certificate %s: TLS_CLIENT_CA_FILE %s does not accept it (%w), "+
			"and a follower presents it to the leader's mutex port to forward v1 requests", peer.CertFile, cfg.ClientCAFile, err)
	}
	return t, nil
}

// checkForwarding logs a warning when the other nodes, checking as this
// one would, will refuse this node's server certificate for the host of
// its client address (addr) when they forward v1 requests to it as the
// leader.
func (t *transport) checkForwarding(addr string, log *slog.Logger) {
	if t.peer == nil {
		return
	}
	host, _, err := net.SplitHostPort(addr)
	if err == nil {
		err = t.peer.VerifyLeader(t.store.Chain(), host)
	}
	if err != nil {
		log.Warn("followers will not accept TLS_CERT_FILE when they forward v1 requests to this node: "+
			"it should be signed by a CA of TLS_PEER_CA_FILE or a system root, for the host of the client address",
			slog.String("client_address", addr), slog.Any("error", err))
	}
}

// cluster returns the TLS between the nodes of a cluster; nil: plain TCP.
func (t *transport) cluster() cluster.PeerTLS {
	if t.peer == nil {
		return nil
	}
	return t.peer
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
	if t.peer == nil {
		return
	}
	if err := t.peer.Reload(); err != nil {
		log.Error("TLS node files not reloaded; the node certificate loaded before stays in force", slog.Any("error", err))
		return
	}
	c = t.peer.Certificate()
	log.Info("TLS node files reloaded", slog.String("subject", c.Subject.String()),
		slog.Time("not_after", c.NotAfter))
}
