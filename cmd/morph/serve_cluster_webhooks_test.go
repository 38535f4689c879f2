package main

import (
	"slices"
	"strings"
	"testing"
)

func TestClusterCertificateHosts(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  clusterOptions
		extra []string
		want  []string
	}{
		{"service", clusterOptions{namespace: "morph-system", serviceName: "morph"}, nil,
			[]string{"morph.morph-system.svc", "morph.morph-system.svc.cluster.local"}},
		{"service and extra", clusterOptions{namespace: "ops", serviceName: "hooks"}, []string{"hooks.example.com", "hooks.ops.svc"},
			[]string{"hooks.ops.svc", "hooks.ops.svc.cluster.local", "hooks.example.com"}},
		{"url with an IP", clusterOptions{namespace: "ops", serviceName: "morph", webhookURL: "https://127.0.0.1:8443"}, nil,
			[]string{"127.0.0.1"}},
		{"url with a name", clusterOptions{namespace: "ops", serviceName: "morph", webhookURL: "https://morph.dev.local:9443"}, nil,
			[]string{"morph.dev.local"}},
	} {
		got, err := tc.opts.certificateHosts(tc.extra)
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("%s: hosts %v (%v); want %v", tc.name, got, err, tc.want)
		}
	}
}

func TestClusterConfigOptions(t *testing.T) {
	o := clusterOptions{namespace: "morph-system", serviceName: "morph"}
	got, err := o.configOptions()
	if err != nil || got.Service == nil || got.Service.Namespace != "morph-system" || got.Service.Name != "morph" || got.Service.Port != 443 || got.URL != "" {
		t.Errorf("service registration %+v (%v)", got, err)
	}
	o.webhookURL = "https://127.0.0.1:8443"
	if got, err := o.configOptions(); err != nil || got.URL != o.webhookURL || got.Service != nil {
		t.Errorf("URL registration %+v (%v)", got, err)
	}
	o.webhookURL = "http://127.0.0.1:8443"
	if _, err := o.configOptions(); err == nil || !strings.Contains(err.Error(), "--webhook-url") {
		t.Errorf("an http URL: error %v; want one naming --webhook-url", err)
	}
}

func TestClusterNamespace(t *testing.T) {
	o := clusterOptions{}
	if err := o.resolveNamespace(); err != nil || (o.namespace != "morph-system" && o.namespace == "") {
		t.Errorf("default namespace %q (%v)", o.namespace, err)
	}
	o = clusterOptions{namespace: "Not_A_Label"}
	if err := o.resolveNamespace(); err == nil || !strings.Contains(err.Error(), "--namespace") {
		t.Errorf("a bad namespace: error %v", err)
	}
}

func TestClusterModeNeedsNoCertificateFlags(t *testing.T) {
	o := &serveOptions{policies: "p", admission: true, conversion: true, shutdownGrace: 1, reloadInterval: 1}
	if err := o.check(); err == nil {
		t.Fatal("folder mode without certificates accepted")
	}
	o.cluster.kubeconfig = "kubeconfig"
	if err := o.check(); err != nil {
		t.Errorf("cluster mode without --cert-dir or --tls-cert: %v; want the Secret's certificates", err)
	}
}

func TestClusterOverrides(t *testing.T) {
	for _, tc := range []struct {
		name, failure string
		exclude       []string
		wantFailure   string
		wantErr       string
	}{
		{name: "none"},
		{name: "Ignore", failure: "Ignore", wantFailure: "Ignore"},
		{name: "Fail and exclusions", failure: "Fail", exclude: []string{"kyverno", "gatekeeper-system"}, wantFailure: "Fail"},
		{name: "lower case", failure: "ignore", wantErr: "--webhook-failure-policy"},
		{name: "bad namespace", exclude: []string{"Not_A_Label"}, wantErr: "--exclude-namespace"},
	} {
		c := clusterOptions{failurePolicy: tc.failure, excludeNamespaces: tc.exclude}
		got, err := c.overrides()
		switch {
		case tc.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || exitCode(err) != exitUsage {
				t.Errorf("%s: error %v; want a usage error naming %s", tc.name, err, tc.wantErr)
			}
		case err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case string(got.FailurePolicy) != tc.wantFailure || !slices.Equal(got.ExcludeNamespaces, tc.exclude):
			t.Errorf("%s: overrides %+v", tc.name, got)
		}
	}
}
