package e2e

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// CRDTimeout bounds the wait for a CRD to become Established and served, and
// for its removal at cleanup.
const CRDTimeout = time.Minute

// CreateNamespace creates a namespace with the given labels and deletes it at
// test cleanup. A name ending in "-" is used as a generateName prefix.
//
// There is no controller-manager, so a deleted namespace stays Terminating
// and the objects in it are not removed; that is harmless for tests as long
// as names are not reused.
func CreateNamespace(t testing.TB, name string, labels map[string]string) *corev1.Namespace {
	t.Helper()
	c := Current(t)
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}
	if strings.HasSuffix(name, "-") {
		ns.Name, ns.GenerateName = "", name
	}
	created, err := c.Kube.CoreV1().Namespaces().Create(t.Context(), ns, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create namespace %q: %v", name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		err := c.Kube.CoreV1().Namespaces().Delete(ctx, created.Name, metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete namespace %s: %v", created.Name, err)
		}
	})
	return created
}

// CreateCRD creates crd, waits until it is Established and every served
// version answers a list request, and deletes it at test cleanup, waiting
// until it is gone so that a later test may create it again.
//
// Note that kube-apiserver delays each create of a custom resource by 2s
// while its CRD became Established less than 2s ago (an upstream guard for
// HA clusters), so the first create after CreateCRD is slow.
func CreateCRD(t testing.TB, crd *apiextensionsv1.CustomResourceDefinition) *apiextensionsv1.CustomResourceDefinition {
	t.Helper()
	c := Current(t)
	crds := c.APIExtensions.ApiextensionsV1().CustomResourceDefinitions()
	created, err := crds.Create(t.Context(), crd, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create CRD %s: %v", crd.Name, err)
	}
	t.Cleanup(func() {
		ctx, cancel := cleanupContext()
		defer cancel()
		start := time.Now()
		if err := crds.Delete(ctx, created.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("cleanup: delete CRD %s: %v", created.Name, err)
			return
		}
		err := poll(ctx, CRDTimeout, func() error {
			_, err := crds.Get(ctx, created.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return nil
			}
			if err == nil {
				return errors.New("still present")
			}
			return err
		})
		if err != nil {
			t.Errorf("cleanup: CRD %s not removed: %v", created.Name, err)
			return
		}
		t.Logf("cleanup: CRD %s removed after %v", created.Name, time.Since(start).Round(time.Millisecond))
	})
	start := time.Now()

	Eventually(t, CRDTimeout, func() error {
		got, err := crds.Get(t.Context(), created.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, cond := range []apiextensionsv1.CustomResourceDefinitionConditionType{apiextensionsv1.NamesAccepted, apiextensionsv1.Established} {
			if !crdCondition(got, cond) {
				return fmt.Errorf("CRD %s: condition %s is not True (conditions: %+v)", got.Name, cond, got.Status.Conditions)
			}
		}
		created = got
		return nil
	})
	// Established can precede the REST handler serving every version; wait
	// until each served version answers.
	for _, v := range created.Spec.Versions {
		if !v.Served {
			continue
		}
		gvr := schema.GroupVersionResource{Group: created.Spec.Group, Version: v.Name, Resource: created.Spec.Names.Plural}
		Eventually(t, CRDTimeout, func() error {
			_, err := c.Dynamic.Resource(gvr).List(t.Context(), metav1.ListOptions{Limit: 1})
			if err != nil {
				return fmt.Errorf("list %s: %w", gvr, err)
			}
			return nil
		})
	}
	t.Logf("CRD %s established and served after %v", created.Name, time.Since(start).Round(time.Millisecond))
	return created
}

func crdCondition(crd *apiextensionsv1.CustomResourceDefinition, typ apiextensionsv1.CustomResourceDefinitionConditionType) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == typ {
			return c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return false
}
