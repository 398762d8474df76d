// Command pause is the pod sandbox's process for test nodes that cannot pull registry.k8s.io/pause:
// it waits until SIGINT or SIGTERM and exits 0, as the real pause does.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
}
