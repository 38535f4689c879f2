package engine

import (
	"context"
	"fmt"
	"strings"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Conversions indexes converters by group and kind. It is the one place that converts an
// object: `morph convert` and the webhook's /convert both call Convert.
type Conversions struct {
	byGK map[schema.GroupKind]Converter
}

// NewConversions indexes converters; two converters of one group and kind are an error.
func NewConversions(cs []Converter) (*Conversions, error) {
	c := &Conversions{byGK: make(map[schema.GroupKind]Converter, len(cs))}
	for _, conv := range cs {
		if conv.Convert == nil {
			return nil, fmt.Errorf("converter %s has no convert function", conv.ID)
		}
		if prev, dup := c.byGK[conv.GroupKind]; dup {
			return nil, fmt.Errorf("%s and %s both convert %s: keep one conversion policy per kind", prev.ID, conv.ID, conv.GroupKind)
		}
		c.byGK[conv.GroupKind] = conv
	}
	return c, nil
}

// Convert returns obj at desired ("group/version"; a bare version means obj's own
// group). An object already at that version is returned as is, with changed false. The
// conversion stays within the object's group, runs under the converter's timeout and
// the request's deadline, and must answer the desired apiVersion. Errors do not name the
// object: the caller does.
func (c *Conversions) Convert(ctx context.Context, obj map[string]any, desired string) (out map[string]any, changed bool, err error) {
	apiVersion, _ := obj["apiVersion"].(string)
	kind, _ := obj["kind"].(string)
	if apiVersion == "" || kind == "" {
		return nil, false, fmt.Errorf("apiVersion and kind are required")
	}
	from, err := schema.ParseGroupVersion(apiVersion)
	if err != nil {
		return nil, false, fmt.Errorf("apiVersion: %w", err)
	}
	to, err := schema.ParseGroupVersion(desired)
	if err != nil || to.Version == "" {
		return nil, false, fmt.Errorf("desired version %q is not group/version or version", desired)
	}
	if to.Group == "" && !strings.Contains(desired, "/") {
		to.Group = from.Group
	}
	if from == to {
		return obj, false, nil
	}
	if from.Group != to.Group {
		return nil, false, fmt.Errorf("cannot convert group %q to %q: conversion stays within a group", from.Group, to.Group)
	}
	gk := schema.GroupKind{Group: from.Group, Kind: kind}
	conv, ok := c.byGK[gk]
	if !ok {
		return nil, false, fmt.Errorf("no conversion policy for %s: add conversion paths for it", gk)
	}
	out, err = runConvert(ctx, &conv, obj, to.String())
	if err != nil {
		return nil, false, fmt.Errorf("converting %s to %s with %s: %w", apiVersion, to, conv.ID, err)
	}
	if got, _ := out["apiVersion"].(string); got != to.String() {
		return nil, false, fmt.Errorf("%s returned apiVersion %q instead of %q", conv.ID, got, to)
	}
	return out, true, nil
}

// runConvert runs one converter under its budgets, turning a panic into an error.
func runConvert(ctx context.Context, conv *Converter, obj map[string]any, to string) (out map[string]any, err error) {
	ctx, done := callContext(ctx, &conv.Descriptor)
	defer done()
	defer func() {
		if r := recover(); r != nil {
			out, err = nil, fmt.Errorf("panic: %v", r)
		}
	}()
	out, err = conv.Convert(ctx, obj, to)
	if lateErr := late(ctx); lateErr != nil {
		return nil, lateErr
	}
	return out, err
}
