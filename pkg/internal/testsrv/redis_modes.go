package testsrv

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	"github.com/redis/go-redis/v9"
)

// TLSFiles are a CA and a server certificate it signed, for 127.0.0.1 and
// "redis.test", as PEM files.
type TLSFiles struct {
	CA, Cert, Key string
}

// MakeTLS writes a fresh CA and a server certificate signed by it to dir.
func MakeTLS(dir string) (TLSFiles, error) {
	f := TLSFiles{CA: filepath.Join(dir, "ca.pem"), Cert: filepath.Join(dir, "server.pem"), Key: filepath.Join(dir, "server-key.pem")}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "flashsale test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return f, err
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "redis.test"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(24 * time.Hour),
		DNSNames: []string{"redis.test"}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &key.PublicKey, caKey)
	if err != nil {
		return f, err
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return f, err
	}
	for path, block := range map[string]*pem.Block{
		f.CA: {Type: "CERTIFICATE", Bytes: caDER}, f.Cert: {Type: "CERTIFICATE", Bytes: leafDER}, f.Key: {Type: "EC PRIVATE KEY", Bytes: keyDER},
	} {
		if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
			return f, err
		}
	}
	return f, nil
}

// StartRedisTLS starts redis-server speaking TLS only, with files' server
// certificate; clients need not present one.
func StartRedisTLS(dir string, files TLSFiles) (*Redis, error) {
	bin, err := LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	r := &Redis{srv: server{name: "redis-server (tls)", bin: bin, logPath: filepath.Join(dir, "redis.log")}}
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(files.CA)
	if err != nil {
		return nil, err
	}
	pool.AppendCertsFromPEM(caPEM)
	r.srv.ready = func() error {
		c := redis.NewClient(&redis.Options{Addr: r.Addr, DialTimeout: time.Second, MaxRetries: -1,
			TLSConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}})
		defer c.Close()
		return r.srv.answersItself(c)
	}
	err = onPort(&r.srv, func(port int) {
		r.Addr = net.JoinHostPort("127.0.0.1", itoa(port))
		r.srv.args = []string{"--port", "0", "--tls-port", itoa(port), "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
			"--tls-cert-file", files.Cert, "--tls-key-file", files.Key, "--tls-ca-cert-file", files.CA, "--tls-auth-clients", "no"}
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

// Sentinel is a throwaway redis-server in sentinel mode.
type Sentinel struct {
	Addr string
	srv  server
}

// StartSentinel starts a sentinel watching master (host:port) under name,
// with quick timeouts, its writable configuration in dir. failoverTimeout,
// if given, replaces the 5 s failover-timeout: it is also how long the
// sentinel leaves a replica replicating from an address other than the
// master's (a proxy on its link) before it points the replica at the
// master itself.
func StartSentinel(dir, name, master string, failoverTimeout ...time.Duration) (*Sentinel, error) {
	timeout := 5 * time.Second
	if len(failoverTimeout) > 0 {
		timeout = failoverTimeout[0]
	}
	bin, err := LookPath("redis-server")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	host, port, err := net.SplitHostPort(master)
	if err != nil {
		return nil, err
	}
	s := &Sentinel{srv: server{name: "redis-sentinel", bin: bin, logPath: filepath.Join(dir, "sentinel.log")}}
	s.srv.ready = func() error {
		c := redis.NewClient(&redis.Options{Addr: s.Addr, DialTimeout: time.Second, MaxRetries: -1})
		defer c.Close()
		return s.srv.answersItself(c)
	}
	conf := filepath.Join(dir, "sentinel.conf")
	err = onPort(&s.srv, func(p int) {
		s.Addr = net.JoinHostPort("127.0.0.1", itoa(p))
		_ = os.WriteFile(conf, []byte("port "+itoa(p)+"\nbind 127.0.0.1\ndir "+dir+"\n"+
			"sentinel monitor "+name+" "+host+" "+port+" 1\n"+
			"sentinel down-after-milliseconds "+name+" 1000\n"+
			"sentinel failover-timeout "+name+" "+itoa(int(timeout.Milliseconds()))+"\n"), 0o644)
		s.srv.args = []string{conf, "--sentinel"}
	})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// Kill kills the sentinel.
func (s *Sentinel) Kill() error { return s.srv.kill() }
