// The process of a pod sandbox: holds the pod's namespaces until it is told to
// stop, and reaps the orphans the pod's containers leave (it is their init when
// the pod shares one PID namespace). No registry is reachable, so the node
// cannot pull registry.k8s.io/pause; this is built and imported instead.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGINT, syscall.SIGTERM)
	children := make(chan os.Signal, 16)
	signal.Notify(children, syscall.SIGCHLD)
	for {
		select {
		case <-stop:
			return
		case <-children:
			for {
				pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
				if pid <= 0 || err != nil {
					break
				}
			}
		}
	}
}
