package main

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestSubresourceRequest(t *testing.T) {
	tests := []struct {
		gvk      schema.GroupVersionKind
		flag     string
		resource schema.GroupVersionResource
		sub      string
	}{
		{schema.GroupVersionKind{Version: "v1", Kind: "Binding"}, "binding", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "binding"},
		{schema.GroupVersionKind{Group: "policy", Version: "v1", Kind: "Eviction"}, "eviction", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "eviction"},
		{schema.GroupVersionKind{Version: "v1", Kind: "Pod"}, "status", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "status"},
		{schema.GroupVersionKind{Group: "autoscaling", Version: "v1", Kind: "Scale"}, "apps/v1/deployments/scale", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "scale"},
		{schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}, "deployments/status", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, "status"},
		{schema.GroupVersionKind{Version: "v1", Kind: "Binding"}, "v1/pods/binding", schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "binding"},
	}
	for _, tt := range tests {
		res, sub := subresourceRequest(tt.gvk, tt.flag)
		if res != tt.resource || sub != tt.sub {
			t.Errorf("subresourceRequest(%v, %q) = %v, %q; want %v, %q", tt.gvk, tt.flag, res, sub, tt.resource, tt.sub)
		}
	}
}
