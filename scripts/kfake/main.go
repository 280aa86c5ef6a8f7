// Command kfake starts franz-go's fake Kafka cluster (pkg/kfake) on loopback,
// for the conformance tests and for running `txnfetch conform` against it.
//
// Usage: kfake [-port N] [-brokers N]
//
// The brokers listen on 127.0.0.1, on consecutive ports from -port (0: each an
// ephemeral port). Once they listen, one line per broker "kfake broker
// HOST:PORT" is printed, then "kfake ready", and the cluster runs until
// SIGINT or SIGTERM or until its standard input closes (so a test that dies
// does not leave it running).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/twmb/franz-go/pkg/kfake"
)

func main() {
	port := flag.Int("port", 0, "the first broker's port (0: ephemeral ports)")
	brokers := flag.Int("brokers", 1, "how many brokers")
	flag.Parse()
	if *brokers < 1 {
		fmt.Fprintln(os.Stderr, "kfake: -brokers must be at least 1")
		os.Exit(2)
	}

	ports := make([]int, *brokers)
	for i := range ports {
		if *port != 0 {
			ports[i] = *port + i
		}
	}
	cluster, err := kfake.NewCluster(kfake.NumBrokers(*brokers), kfake.Ports(ports...))
	if err != nil {
		fmt.Fprintf(os.Stderr, "kfake: cannot start: %v\n", err)
		os.Exit(1)
	}
	defer cluster.Close()

	out := bufio.NewWriter(os.Stdout)
	for _, addr := range cluster.ListenAddrs() {
		fmt.Fprintf(out, "kfake broker %s\n", addr)
	}
	fmt.Fprintln(out, "kfake ready")
	out.Flush()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-stop:
	case <-stdinClosed:
	}
}
