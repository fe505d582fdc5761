// Command kubeall is kube-apiserver, kube-controller-manager and
// kube-scheduler in one binary, chosen by the name it is run as (a link
// of that name): one file of 116 MB instead of three of 383 MB in all, to
// carry to a machine without Go (hack/device-bundle.sh). Tests here use
// the three binaries hack/kube-tools.sh builds.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	_ "time/tzdata"

	"github.com/spf13/cobra"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	apiserver "k8s.io/kubernetes/cmd/kube-apiserver/app"
	cm "k8s.io/kubernetes/cmd/kube-controller-manager/app"
	sched "k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	var c *cobra.Command
	switch filepath.Base(os.Args[0]) {
	case "kube-apiserver":
		c = apiserver.NewAPIServerCommand()
	case "kube-controller-manager":
		c = cm.NewControllerManagerCommand()
	case "kube-scheduler":
		c = sched.NewSchedulerCommand()
	default:
		fmt.Fprintln(os.Stderr, "kubeall: run as kube-apiserver, kube-controller-manager or kube-scheduler")
		os.Exit(2)
	}
	os.Exit(cli.Run(c))
}
