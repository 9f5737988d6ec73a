package main

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	lockingcenter "github.com/locking-center/locking-center/clients/go"
	"github.com/locking-center/locking-center/manager"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Defaults of the global flags.
const (
	defaultAddress        = "localhost:22119"
	defaultManagerAddress = "localhost:22120"
	defaultConnectTimeout = 5 * time.Second
	defaultTimeout        = 10 * time.Second
)

// globalOptions are the flags every command shares, resolved from the
// command line, then the environment, then the defaults.
type globalOptions struct {
	Address        string        // mutex ports, host:port or a comma list of the nodes of a cluster
	ManagerAddress string        // management ports, likewise, in the order of Address
	Source         string        // owner name sent with v1 requests and as a session's name, 0..127 bytes
	ConnectTimeout time.Duration // bound on each TCP connect, positive
	Timeout        time.Duration // bound on the answer of a request that does not wait for a key, positive
	Token          string        // sent to a server with authentication on; empty: none
	TLS            tlsOptions    // how to speak TLS to every port; off by default
}

// factory hands the commands what they share: the process's streams and
// signals, and clients built from the resolved global flags.
type factory struct {
	sys    system
	global globalOptions
	// managerErr is why the management address could not be derived from
	// the mutex address; only the commands that use it fail with it.
	managerErr error
	// managerAddrs are the management addresses, one per node.
	managerAddrs []string
	// tls is the client TLS of the global flags; nil: plain TCP.
	tls *tls.Config
	// certs is what the servers asked of the client certificate.
	certs certificateSeen
}

// mutexClient returns a client of the mutex port.
func (f *factory) mutexClient() *lockingcenter.Client {
	return lockingcenter.New(f.global.Address, f.clientOptions()...)
}

// clientOptions are the source and timeouts of the global flags, as
// client options (of a v1 client or of a session).
func (f *factory) clientOptions() []lockingcenter.Option {
	return []lockingcenter.Option{
		lockingcenter.WithSource(f.global.Source),
		lockingcenter.WithConnectTimeout(f.global.ConnectTimeout),
		lockingcenter.WithReadTimeout(f.global.Timeout),
		lockingcenter.WithTLS(f.tls),
	}
}

// managers returns the management ports of the nodes, or the usage error
// of a management address that could not be derived.
func (f *factory) managers() (*managers, error) {
	if f.managerErr != nil {
		return nil, f.managerErr
	}
	return &managers{
		mutex: splitAddresses(f.global.Address),
		addrs: f.managerAddrs,
		base: manager.Client{
			ConnectTimeout: f.global.ConnectTimeout,
			ReadTimeout:    f.global.Timeout,
			Token:          f.global.Token,
			TLS:            f.tls,
		},
	}, nil
}

// envSetting ties a global flag to its environment variable.
type envSetting struct {
	flag, env string
}

var envSettings = []envSetting{
	{"address", "LC_ADDRESS"},
	{"manager-address", "LC_MANAGER_ADDRESS"},
	{"source", "LC_SOURCE"},
	{"connect-timeout", "LC_CONNECT_TIMEOUT"},
	{"timeout", "LC_TIMEOUT"},
	{"token", "LC_TOKEN"},
	{"tls", "LC_TLS"},
	{"tls-ca", "LC_CA_FILE"},
	{"tls-cert", "LC_CERT_FILE"},
	{"tls-key", "LC_KEY_FILE"},
}

// oldTLSFlags are the TLS flags' names before they said TLS: hidden
// aliases, for one release, that warn on stderr. --key read as a lock's
// key (lc-cli lock --key foo -- cmd).
var oldTLSFlags = []struct{ old, now string }{{"ca", "tls-ca"}, {"cert", "tls-cert"}, {"key", "tls-key"}}

func newRootCommand(sys system) (*cobra.Command, *factory) {
	f := &factory{sys: sys}
	root := &cobra.Command{
		Use:   "lc-cli",
		Short: "Inspect a Locking-Center lock table and take locks from a shell",
		Long: `lc-cli talks to a Locking-Center server. keys, sessions, reset and cluster
use the management port; lock, trylock, unlock, wait and watch use the
mutex port like any client. Given every node of a cluster (--address
a:22119,b:22119,c:22119), each command follows the leader.

Each global flag can also be set by its environment variable, shown in
brackets; a flag on the command line wins.

Exit codes: 0 success, 1 trylock, lock -n or lock -w found the key held
by another, 2 any failure (one line on stderr), 127 the command of
lock -- could not be started. lock -- otherwise exits with its command's
code, and 128+N when the command, or lc-cli while waiting, ended by
signal N.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			return f.resolve(cmd.Flags())
		},
	}
	root.SetIn(sys.Stdin)
	root.SetOut(sys.Stdout)
	root.SetErr(sys.Stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return usagef("%v (see lc-cli --help)", err)
	})

	fs := root.PersistentFlags()
	fs.StringVar(&f.global.Address, "address", defaultAddress, "mutex port of the server, host:port; for a cluster, a comma list of its nodes, whose leader lc-cli follows [$LC_ADDRESS]")
	fs.StringVar(&f.global.ManagerAddress, "manager-address", defaultManagerAddress, "management port of the server, host:port, or a comma list in the order of --address; when only --address is given, each one's host and port+1, as lcd does [$LC_MANAGER_ADDRESS]")
	fs.StringVar(&f.global.Source, "source", defaultSource(sys.Hostname), "owner name sent with lock, trylock, wait and watch, at most 127 bytes; reset -s matches it [$LC_SOURCE]")
	fs.DurationVar(&f.global.ConnectTimeout, "connect-timeout", defaultConnectTimeout, "bound on each TCP connect; a server that does not accept in time is a failure [$LC_CONNECT_TIMEOUT]")
	fs.StringVar(&f.global.Token, "token", "", "token for a server with authentication on: sent by the sessions of lock --, wait and watch, and by the management commands; prefer LC_TOKEN, as arguments show in ps [$LC_TOKEN]")
	fs.BoolVar(&f.global.TLS.On, "tls", false, "speak TLS to every port, verifying the server against the system's roots unless --tls-ca is given [$LC_TLS]")
	fs.StringVar(&f.global.TLS.CAFile, "tls-ca", "", "PEM CA certificates the server's certificate must chain to; implies --tls [$LC_CA_FILE]")
	fs.StringVar(&f.global.TLS.CertFile, "tls-cert", "", "PEM client certificate, for a server that requires one (with --tls-key); implies --tls [$LC_CERT_FILE]")
	fs.StringVar(&f.global.TLS.KeyFile, "tls-key", "", "PEM private key of --tls-cert [$LC_KEY_FILE]")
	for _, o := range oldTLSFlags {
		fs.String(o.old, "", "the old name of --"+o.now)
		fs.MarkHidden(o.old)
	}
	fs.DurationVar(&f.global.Timeout, "timeout", defaultTimeout, "bound on the answer to every request that does not wait for a key (all but lock and the wait of wait); a server that does not answer in time is a failure [$LC_TIMEOUT]")

	root.AddCommand(
		newKeysCommand(f),
		newSessionsCommand(f),
		newClusterCommand(f),
		newSnapshotCommand(f),
		newResetCommand(f),
		newLockCommand(f),
		newTryLockCommand(f),
		newUnlockCommand(f),
		newWaitCommand(f),
		newWatchCommand(f),
		newVersionCommand(),
		newTokenCommand(),
	)
	return root, f
}

// defaultSource is lc-cli@<hostname>, or lc-cli when the host has no name.
func defaultSource(hostname string) string {
	if hostname == "" {
		return "lc-cli"
	}
	s := "lc-cli@" + hostname
	if len(s) > lockingcenter.MaxSourceLen {
		s = s[:lockingcenter.MaxSourceLen]
	}
	return s
}

// resolve fills every global flag not given on the command line from its
// environment variable, then checks the result.
func (f *factory) resolve(fs *pflag.FlagSet) error {
	env := make(map[string]string, len(f.sys.Environ))
	for _, kv := range f.sys.Environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			env[k] = v
		}
	}
	// An old name given is the flag given, over its variable.
	var old []struct{ old, now string }
	for _, o := range oldTLSFlags {
		if fs.Lookup(o.old) == nil || !fs.Changed(o.old) || fs.Changed(o.now) {
			continue
		}
		old = append(old, o)
		fs.Set(o.now, fs.Lookup(o.old).Value.String())
		f.global.TLS.OldKey = f.global.TLS.OldKey || o.old == "key"
	}
	for _, s := range envSettings {
		v, ok := env[s.env]
		if !ok || fs.Changed(s.flag) || fs.Lookup(s.flag) == nil {
			continue
		}
		if err := fs.Set(s.flag, v); err != nil {
			return usagef("$%s=%q: %v", s.env, v, err)
		}
	}
	for _, o := range old {
		// --key without a certificate is refused with its own message.
		if o.old != "key" || f.global.TLS.CertFile != "" {
			fmt.Fprintf(f.sys.Stderr, "lc-cli: warning: --%s is now --%s; the old name goes in the next release\n", o.old, o.now)
		}
	}
	if err := checkSourceLen(f.global.Source); err != nil {
		return err
	}
	if f.global.ConnectTimeout <= 0 {
		return usagef("connect timeout %v: want a positive duration such as 5s", f.global.ConnectTimeout)
	}
	if f.global.Timeout <= 0 {
		return usagef("timeout %v: want a positive duration such as 10s", f.global.Timeout)
	}
	var err error
	var cert *tls.Certificate
	if f.tls, cert, err = f.global.TLS.config(); err != nil {
		return err
	}
	if f.tls != nil {
		f.certs.offer(f.tls, cert)
	}
	if len(splitAddresses(f.global.Address)) == 0 {
		return usagef("--address %q: want host:port, or a comma list of them", f.global.Address)
	}
	f.managerErr = nil
	f.managerAddrs = splitAddresses(f.global.ManagerAddress)
	if fs.Changed("address") && !fs.Changed("manager-address") {
		f.managerAddrs, f.managerErr = managerAddressesOf(splitAddresses(f.global.Address))
	} else if len(f.managerAddrs) == 0 {
		return usagef("--manager-address %q: want host:port, or a comma list of them", f.global.ManagerAddress)
	}
	return nil
}

// managerAddressOf derives the management address from the mutex address
// as lcd does: the same host, port+1.
func managerAddressOf(address string) (string, error) {
	cannot := func(why string) (string, error) {
		return "", usagef("cannot derive the management address from the mutex address %q: %s; give --manager-address or $LC_MANAGER_ADDRESS", address, why)
	}
	host, portStr, err := net.SplitHostPort(address)
	if err != nil {
		return cannot("want host:port")
	}
	port, err := strconv.Atoi(portStr)
	switch {
	case err != nil || port < 1 || port > 65535:
		return cannot("the port is not a number from 1 to 65534")
	case port == 65535:
		return cannot("port 65535 leaves no room for port+1")
	}
	return net.JoinHostPort(host, strconv.Itoa(port+1)), nil
}

// checkKey rejects a key the server would refuse, before any connection.
func checkKey(key string) error {
	switch {
	case key == "":
		return usagef("key is empty: keys are 1 to %d bytes", lockingcenter.MaxKeyLen)
	case len(key) > lockingcenter.MaxKeyLen:
		return usagef("key of %d bytes is too long: keys are 1 to %d bytes", len(key), lockingcenter.MaxKeyLen)
	}
	return nil
}

// checkSourceLen rejects a source longer than the server accepts.
func checkSourceLen(source string) error {
	if len(source) > lockingcenter.MaxSourceLen {
		return usagef("source of %d bytes is too long: sources are at most %d bytes", len(source), lockingcenter.MaxSourceLen)
	}
	return nil
}

// failure wraps err, from a client, as an exit with code 2. A bare
// refusal ('-') of the management port carries no reason, so its message
// says what most often causes it (a follower's refusal has been followed
// to the leader by then); a refusal with the server's reason is left as
// it is.
func failure(err error) error {
	var refusal *manager.Refusal
	if errors.Is(err, manager.ErrFailed) && !errors.Is(err, errNotLeading) && !(errors.As(err, &refusal) && refusal.Message != "") {
		err = fmt.Errorf("%w (the server gives no reason: with authentication on, this takes an admin's --token)", err)
	}
	return &exitError{code: exitFailure, err: err}
}
