package deploy_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/combo-service/combo-service/conf"
)

// k8sObject is the part of a Kubernetes object the checks read.
type k8sObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		ClusterIP string         `yaml:"clusterIP"`
		Selector  map[string]any `yaml:"selector"` // a Service's labels; a StatefulSet's matchLabels

		ServiceName string `yaml:"serviceName"`
		Ports       []struct {
			Name       string `yaml:"name"`
			Port       int    `yaml:"port"`
			TargetPort string `yaml:"targetPort"`
		} `yaml:"ports"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec k8sPodSpec `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

type k8sPodSpec struct {
	EnableServiceLinks            *bool `yaml:"enableServiceLinks"`
	TerminationGracePeriodSeconds int   `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsUser int `yaml:"runAsUser"`
	} `yaml:"securityContext"`
	Containers []struct {
		Ports []struct {
			Name          string `yaml:"name"`
			ContainerPort int    `yaml:"containerPort"`
		} `yaml:"ports"`
		Env []struct {
			Name      string `yaml:"name"`
			Value     string `yaml:"value"`
			ValueFrom struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
		LivenessProbe  k8sProbe `yaml:"livenessProbe"`
		ReadinessProbe k8sProbe `yaml:"readinessProbe"`
		Resources      struct {
			Limits map[string]string `yaml:"limits"`
		} `yaml:"resources"`
	} `yaml:"containers"`
}

type k8sProbe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port string `yaml:"port"`
	} `yaml:"httpGet"`
}

// deploy/kubernetes.yaml is README's advice for Kubernetes made concrete;
// it must stay true to the service: every COMBO_* variable a key, the
// whole loading; the probes on the metrics port, liveness on /healthz;
// the grace period covering the stop; stable, distinct consumer names;
// no Service links (each a start warning); the image's user; a memory
// limit that holds what the service admits (kubernetes_memory_test.go).
func TestKubernetesExample(t *testing.T) {
	dec := yaml.NewDecoder(bytes.NewReader([]byte(read(t, "deploy/kubernetes.yaml"))))
	var svc, sts *k8sObject
	for {
		var o k8sObject
		if err := dec.Decode(&o); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		switch o.Kind {
		case "Service":
			svc = &o
		case "StatefulSet":
			sts = &o
		}
	}
	if svc == nil || sts == nil {
		t.Fatal("want a Service and a StatefulSet")
	}
	pod := sts.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, got %d", len(pod.Containers))
	}
	ctr := pod.Containers[0]

	// The configuration the environment gives loads, naming no unknown key.
	var environ []string
	consumerFromPodName := false
	for _, e := range ctr.Env {
		switch {
		case e.ValueFrom.FieldRef.FieldPath == "metadata.name":
			consumerFromPodName = e.Name == "COMBO_WORKER_CONSUMER"
			t.Setenv(e.Name, "combo-service-0")
		case e.Value != "":
			t.Setenv(e.Name, e.Value)
		}
		environ = append(environ, e.Name+"=")
	}
	if unknown := conf.UnknownEnv(environ); len(unknown) > 0 {
		t.Errorf("variables that are no configuration key: %v", unknown)
	}
	if !consumerFromPodName {
		t.Error("COMBO_WORKER_CONSUMER must come from the pod's name (stable across restarts, distinct between replicas)")
	}
	c, err := conf.Load("")
	if err != nil {
		t.Fatalf("the example's environment does not load: %v", err)
	}
	if c.Server.ShutdownDelay == 0 {
		t.Error("COMBO_SERVER_SHUTDOWN_DELAY unset: the RPC port closes before the pod leaves its endpoints")
	}
	need := c.Server.ShutdownDelay + 2*time.Second + c.Server.ShutdownTimeout + 5*time.Second
	if grace := time.Duration(pod.TerminationGracePeriodSeconds) * time.Second; grace < need {
		t.Errorf("terminationGracePeriodSeconds %v: README asks for shutdown_delay + shutdown_timeout + 5 s and more, %v here", grace, need)
	}
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Error("enableServiceLinks must be false: each Service named combo-... sets COMBO_* variables, each a start warning")
	}
	if pod.SecurityContext.RunAsUser != 65532 {
		t.Errorf("runAsUser %d, the image's is 65532", pod.SecurityContext.RunAsUser)
	}

	goMemLimit := ""
	for _, e := range ctr.Env {
		if e.Name == "GOMEMLIMIT" {
			goMemLimit = e.Value
		}
	}
	checkExampleMemory(t, ctr.Resources.Limits["memory"], goMemLimit)

	// Ports and probes are the service's.
	_, rpcPort, _ := net.SplitHostPort(c.Server.Addr)
	_, metricsPort, _ := net.SplitHostPort(c.Metrics.Addr)
	named := map[string]string{}
	for _, p := range ctr.Ports {
		named[p.Name] = strconv.Itoa(p.ContainerPort)
	}
	if named["rpc"] != rpcPort || named["metrics"] != metricsPort {
		t.Errorf("container ports %v, want rpc %s and metrics %s", named, rpcPort, metricsPort)
	}
	if p := ctr.LivenessProbe.HTTPGet; p.Path != "/healthz" || p.Port != "metrics" {
		t.Errorf("liveness probe %+v: want /healthz on the metrics port (/readyz fails while Redis does)", p)
	}
	if p := ctr.ReadinessProbe.HTTPGet; p.Path != "/readyz" || p.Port != "metrics" {
		t.Errorf("readiness probe %+v: want /readyz on the metrics port", p)
	}

	// The Service selects the pods, headless, by their named ports.
	if sts.Spec.ServiceName != svc.Metadata.Name || svc.Spec.ClusterIP != "None" {
		t.Errorf("StatefulSet serviceName %q, Service %q clusterIP %q: want the headless Service", sts.Spec.ServiceName, svc.Metadata.Name, svc.Spec.ClusterIP)
	}
	for k, v := range svc.Spec.Selector {
		if sts.Spec.Template.Metadata.Labels[k] != fmt.Sprint(v) {
			t.Errorf("the Service selects %s=%s, which the pods do not carry", k, v)
		}
	}
	for _, p := range svc.Spec.Ports {
		if _, ok := named[p.TargetPort]; !ok {
			t.Errorf("Service port %s targets %q, no container port", p.Name, p.TargetPort)
		}
	}
}
