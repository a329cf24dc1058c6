// Command etcd is a minimal etcd server for the e2e harness: one member, data in
// a directory, client URL on loopback. It wraps go.etcd.io/etcd/server/v3/embed at
// the version Kubernetes itself is tested with.
package main

import (
	"flag"
	"log"
	"net/url"
	"os"
	"os/signal"
	"syscall"

	"go.etcd.io/etcd/server/v3/embed"
)

func main() {
	dataDir := flag.String("data-dir", "etcd-data", "directory for the member's data")
	clientURL := flag.String("listen-client-url", "http://127.0.0.1:2379", "client URL")
	peerURL := flag.String("listen-peer-url", "http://127.0.0.1:2380", "peer URL")
	flag.Parse()

	cfg := embed.NewConfig()
	cfg.Dir = *dataDir
	cfg.LogLevel = "warn"
	c, err := url.Parse(*clientURL)
	if err != nil {
		log.Fatalf("--listen-client-url: %v", err)
	}
	p, err := url.Parse(*peerURL)
	if err != nil {
		log.Fatalf("--listen-peer-url: %v", err)
	}
	cfg.ListenClientUrls = []url.URL{*c}
	cfg.AdvertiseClientUrls = []url.URL{*c}
	cfg.ListenPeerUrls = []url.URL{*p}
	cfg.AdvertisePeerUrls = []url.URL{*p}
	cfg.InitialCluster = cfg.Name + "=" + p.String()

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		log.Fatalf("start etcd: %v", err)
	}
	defer e.Close()
	<-e.Server.ReadyNotify()
	log.Printf("etcd ready on %s", c)

	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	select {
	case err := <-e.Err():
		log.Fatalf("etcd: %v", err)
	case <-sig:
	}
}
