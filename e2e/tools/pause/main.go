// Command pause holds a pod's namespaces open: it sleeps until SIGINT or SIGTERM and reaps
// any child re-parented to it (it is PID 1 of the sandbox when the pod shares its process
// namespace). It does what Kubernetes' own pause does; that one is C and built for images
// pulled from a registry this machine cannot reach.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "-v" {
		os.Stdout.WriteString("pause (capstan e2e)\n")
		return
	}
	signals := make(chan os.Signal, 8)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM, syscall.SIGCHLD)
	for sig := range signals {
		if sig != syscall.SIGCHLD {
			return
		}
		for {
			pid, err := syscall.Wait4(-1, nil, syscall.WNOHANG, nil)
			if pid <= 0 || err != nil {
				break
			}
		}
	}
}
