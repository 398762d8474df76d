// Command fake-cri serves Kubernetes' own fake container runtime (k8s.io/cri-client/pkg/fake, the
// runtime kubemark's hollow nodes use) on a unix socket, so a real kubelet can run without a
// container runtime. It reports the runtime and network ready, holds no pods, and exits on SIGTERM
// or SIGINT.
//
// Usage: fake-cri --socket /path/to/cri.sock
package main

import (
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/cri-client/pkg/fake"
)

func main() {
	socket := flag.String("socket", "", "path of the unix socket to serve the CRI runtime and image services on")
	flag.Parse()
	if *socket == "" || flag.NArg() != 0 {
		fmt.Fprintln(os.Stderr, "usage: fake-cri --socket PATH")
		os.Exit(2)
	}
	runtime := fake.NewFakeRemoteRuntime()
	if err := runtime.Start("unix://" + *socket); err != nil {
		fmt.Fprintf(os.Stderr, "fake-cri: %v\n", err)
		os.Exit(1)
	}
	fmt.Printf("fake-cri: serving on %s\n", *socket)
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	<-stop
	runtime.Stop()
}
