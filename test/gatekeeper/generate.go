// Package gatekeeper holds morph's differential test against Gatekeeper v3.23.1: random
// but realistic cases (objects and mutator sets) run through morph's Gatekeeper dialect
// and through Gatekeeper's own mutation system (the oracle in hack/gatekeeper), whose
// results must agree except for the divergences docs/dialects.md lists. See
// docs/conformance.md.
package gatekeeper

import (
	"fmt"
	"math/rand/v2"
	"strings"

	"sigs.k8s.io/yaml"
)

// Case is one generated (or curated) case.
type Case struct {
	// Name identifies the case: "seed/index" for generated ones.
	Name string `json:"name"`
	// Mutators is a YAML stream of mutator documents.
	Mutators string `json:"mutators"`
	// Object is the object under admission.
	Object map[string]any `json:"object"`
	// RequestNamespace is the admission request's namespace.
	RequestNamespace string `json:"requestNamespace,omitempty"`
	// Namespace is the Namespace object of RequestNamespace.
	Namespace map[string]any `json:"namespace,omitempty"`
	Operation string         `json:"operation"`
	Source    string         `json:"source"`
}

// Generate returns case index of seed: the same arguments always give the same case.
func Generate(seed uint64, index int) Case {
	g := &gen{r: rand.New(rand.NewPCG(seed, uint64(index)))}
	return g.generate(fmt.Sprintf("%d/%d", seed, index))
}

type gen struct {
	r *rand.Rand
}

func (g *gen) pct(p int) bool          { return g.r.IntN(100) < p }
func (g *gen) pick(l ...string) string { return l[g.r.IntN(len(l))] }
func (g *gen) n(lo, hi int) int        { return lo + g.r.IntN(hi-lo+1) }

const digest = "@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

// objectKind is a kind of object the generator builds, with where its Pod spec lives.
type objectKind struct {
	group, version, kind string
	podSpec              string // the location prefix of the Pod spec, "" for none
	namespaced           bool
}

var objectKinds = []objectKind{
	{"", "v1", "Pod", "spec", true},
	{"apps", "v1", "Deployment", "spec.template.spec", true},
	{"batch", "v1", "CronJob", "spec.jobTemplate.spec.template.spec", true},
	{"", "v1", "ConfigMap", "", true},
	{"", "v1", "Namespace", "", false},
}

var (
	containerNames = []string{"app", "sidecar", "proxy", "init", "log-agent"}
	envNames       = []string{"LOG_LEVEL", "MODE", "DEBUG", "REGION"}
	volumeNames    = []string{"data", "config", "cache"}
	namespaces     = []string{"default", "prod-a", "prod-b", "kube-system", "team-x"}
	objectNames    = []string{"web-1", "web-2", "api", "batch-job", "db"}
	labelKeys      = []string{"app", "tier", "team", "env"}
	labelValues    = []string{"web", "backend", "x", "prod", "dev"}
	images         = []string{
		"nginx", "nginx:1.25", "gcr.io/proj/app:v1", "localhost:5000/app" + digest, "registry.k8s.io/pause:3.9",
		"", "app:1.0" + digest, "docker.io/library/busybox", "my.registry.io:2000/repo/app:latest", "localhost/app",
		"quay.io/org/tool@sha256:abc", "ubuntu:", "gcr.io/", ":v1",
	}
	args = []string{"--v=2", "--log", "--alsologtostderr", "-x", "serve"}
)

func (g *gen) generate(name string) Case {
	ok := objectKinds[g.weighted(30, 25, 25, 10, 10)]
	c := Case{Name: name, Operation: "CREATE", Source: "Original"}
	if g.pct(20) {
		c.Operation = "UPDATE"
	}
	if g.pct(8) {
		c.Source = "Generated"
	}
	meta := map[string]any{}
	objName := g.pick(objectNames...)
	if g.pct(10) {
		meta["generateName"] = objName + "-"
	} else {
		meta["name"] = objName
	}
	if ok.kind == "Namespace" {
		meta["name"] = g.pick(namespaces...)
		delete(meta, "generateName")
	}
	if labels := g.labels(); len(labels) > 0 {
		meta["labels"] = labels
	}
	if g.pct(30) {
		meta["annotations"] = map[string]any{"team": g.pick(labelValues...)}
	}
	if ok.namespaced {
		c.RequestNamespace = g.pick(namespaces...)
		if g.pct(60) {
			meta["namespace"] = c.RequestNamespace
		}
		ns := map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": c.RequestNamespace}}
		if labels := g.labels(); len(labels) > 0 {
			ns["metadata"].(map[string]any)["labels"] = labels
		}
		c.Namespace = ns
	}
	obj := map[string]any{"apiVersion": apiVersion(ok.group, ok.version), "kind": ok.kind, "metadata": meta}
	switch ok.kind {
	case "Pod":
		obj["spec"] = g.podSpec()
	case "Deployment":
		obj["spec"] = map[string]any{
			"replicas": int64(g.n(1, 3)),
			"selector": map[string]any{"matchLabels": map[string]any{"app": "web"}},
			"template": map[string]any{"metadata": map[string]any{"labels": map[string]any{"app": "web"}}, "spec": g.podSpec()},
		}
	case "CronJob":
		obj["spec"] = map[string]any{
			"schedule":    "*/5 * * * *",
			"jobTemplate": map[string]any{"spec": map[string]any{"template": map[string]any{"spec": g.podSpec()}}},
		}
	case "ConfigMap":
		obj["data"] = map[string]any{"key": "value"}
	}
	c.Object = obj
	c.Mutators = g.mutators(ok)
	return c
}

func apiVersion(group, version string) string {
	if group == "" {
		return version
	}
	return group + "/" + version
}

func (g *gen) weighted(w ...int) int {
	total := 0
	for _, x := range w {
		total += x
	}
	v := g.r.IntN(total)
	for i, x := range w {
		if v < x {
			return i
		}
		v -= x
	}
	return len(w) - 1
}

func (g *gen) labels() map[string]any {
	n := g.n(0, 2)
	if n == 0 {
		return nil
	}
	m := map[string]any{}
	for range n {
		m[g.pick(labelKeys...)] = g.pick(labelValues...)
	}
	return m
}

func (g *gen) podSpec() map[string]any {
	spec := map[string]any{}
	var cs []any
	used := map[string]bool{}
	for range g.n(1, 3) {
		cs = append(cs, g.container(used))
	}
	if g.pct(2) {
		cs = append(cs, "not-an-object")
	}
	spec["containers"] = cs
	if g.pct(35) {
		var ics []any
		for range g.n(1, 2) {
			ics = append(ics, g.container(map[string]bool{}))
		}
		spec["initContainers"] = ics
	}
	if g.pct(40) {
		var vs []any
		for _, v := range volumeNames[:g.n(1, 3)] {
			vs = append(vs, map[string]any{"name": v, "emptyDir": map[string]any{}})
		}
		spec["volumes"] = vs
	}
	if g.pct(30) {
		var ts []any
		for range g.n(1, 2) {
			t := map[string]any{"key": g.pick("node.kubernetes.io/not-ready", "dedicated", "gpu"), "operator": g.pick("Exists", "Equal"), "effect": "NoSchedule"}
			if g.pct(20) {
				delete(t, "key") // a toleration of every taint has no key
			}
			ts = append(ts, t)
		}
		spec["tolerations"] = ts
	}
	if g.pct(25) {
		spec["priority"] = int64(g.n(0, 2))
	}
	if g.pct(20) {
		spec["dnsPolicy"] = g.pick("ClusterFirst", "Default")
	}
	if g.pct(15) {
		spec["securityContext"] = map[string]any{"runAsNonRoot": g.pct(50)}
	}
	return spec
}

func (g *gen) container(used map[string]bool) map[string]any {
	c := map[string]any{}
	name := g.pick(containerNames...)
	if used[name] && g.pct(80) {
		name += "-2"
	}
	used[name] = true
	if !g.pct(3) {
		c["name"] = name // rarely, a broken container without a name
	}
	if !g.pct(5) {
		c["image"] = g.pick(images...)
	}
	if g.pct(30) {
		c["imagePullPolicy"] = g.pick("Always", "IfNotPresent", "Never")
	}
	if g.pct(40) {
		as := []any{}
		for range g.n(0, 3) {
			as = append(as, g.pick(args...)) // duplicates happen, as in real args
		}
		c["args"] = as
	}
	if g.pct(15) {
		c["command"] = []any{"/bin/sh", "-c", "run"}
	}
	if g.pct(40) {
		var env []any
		for range g.n(1, 3) {
			e := map[string]any{"name": g.pick(envNames...)} // env names may repeat
			if g.pct(85) {
				e["value"] = g.pick("info", "debug", "1", "")
			}
			env = append(env, e)
		}
		c["env"] = env
	}
	if g.pct(35) {
		var ports []any
		for _, p := range []int64{80, 443, 8080}[:g.n(1, 3)] {
			port := map[string]any{"containerPort": p}
			if g.pct(50) {
				port["protocol"] = "TCP"
			}
			ports = append(ports, port)
		}
		c["ports"] = ports
	}
	if g.pct(25) {
		c["volumeMounts"] = []any{map[string]any{"name": "data", "mountPath": g.pick("/data", "/cache")}}
	}
	if g.pct(15) {
		c["securityContext"] = map[string]any{"privileged": g.pct(50)}
	}
	if g.pct(3) {
		c[g.pick("args", "image", "env", "imagePullPolicy")] = nil // an explicit null
	}
	return c
}

// mutators returns a YAML stream of one to five mutators, most of them aimed at ok.
func (g *gen) mutators(ok objectKind) string {
	var docs []string
	n := g.n(1, 5)
	names := map[string]int{}
	for range n {
		var m map[string]any
		switch g.weighted(40, 20, 20, 20, 5) {
		case 0:
			m = g.assign(ok)
		case 4:
			m = g.misfit(ok)
		case 1:
			m = g.modifySet(ok)
		case 2:
			m = g.assignImage(ok)
		default:
			m = g.assignMetadata()
		}
		kind := m["kind"].(string)
		name := fmt.Sprintf("%s-%d", strings.ToLower(kind), names[kind])
		if names[kind] > 0 && g.pct(4) {
			name = fmt.Sprintf("%s-%d", strings.ToLower(kind), names[kind]-1) // a duplicate name
		} else {
			names[kind]++
		}
		m["metadata"] = map[string]any{"name": name}
		if g.pct(1) {
			m["spec"].(map[string]any)["parametrs"] = map[string]any{} //nolint:misspell // a typo on purpose: an unknown field
		}
		out, err := yaml.Marshal(m)
		if err != nil {
			panic(err)
		}
		docs = append(docs, string(out))
	}
	return strings.Join(docs, "---\n")
}

func (g *gen) version(kind string) string {
	if kind == "AssignImage" {
		if g.pct(4) {
			return g.pick("v1", "v1beta1")
		}
		return "v1alpha1"
	}
	if g.pct(80) {
		return "v1"
	}
	return g.pick("v1beta1", "v1alpha1")
}

func (g *gen) head(kind string, ok objectKind, location string) map[string]any {
	spec := map[string]any{"location": location}
	if kind != "AssignMetadata" {
		spec["applyTo"] = g.applyTo(ok)
	}
	if m := g.match(ok); len(m) > 0 {
		spec["match"] = m
	}
	return map[string]any{"apiVersion": "mutations.gatekeeper.sh/" + g.version(kind), "kind": kind, "spec": spec}
}

func (g *gen) applyTo(ok objectKind) []any {
	target := ok
	if g.pct(15) {
		target = objectKinds[g.r.IntN(3)]
	}
	entry := map[string]any{"groups": []any{target.group}, "versions": []any{target.version}, "kinds": []any{target.kind}}
	if g.pct(20) {
		other := objectKinds[g.r.IntN(len(objectKinds))]
		if other.group == target.group {
			entry["kinds"] = []any{target.kind, other.kind}
		}
	}
	if g.pct(15) {
		entry["operations"] = []any{g.pick("CREATE", "UPDATE", "*")}
	}
	if g.pct(3) {
		entry["versions"] = []any{}
	}
	return []any{entry}
}

func (g *gen) match(ok objectKind) map[string]any {
	m := map[string]any{}
	if g.pct(20) {
		m["scope"] = g.pick("Namespaced", "Cluster", "*")
		if g.pct(3) {
			m["scope"] = "cluster" // not an enum in Gatekeeper's CRD
		}
	}
	if g.pct(30) {
		kinds := []any{ok.kind}
		if g.pct(30) {
			kinds = []any{"*"}
		} else if g.pct(20) {
			kinds = []any{"Deployment"}
		}
		groups := []any{"*"}
		if g.pct(50) {
			groups = []any{ok.group}
		}
		m["kinds"] = []any{map[string]any{"apiGroups": groups, "kinds": kinds}}
	}
	if g.pct(15) {
		m["namespaces"] = []any{g.pick("default", "prod-*", "team-x", "*-b")}
		if g.pct(5) {
			m["namespaces"] = []any{g.pick("Prod", "team_x", "a*b")} // outside the CRD's pattern
		}
	}
	if g.pct(15) {
		m["excludedNamespaces"] = []any{g.pick("kube-system", "prod-*", "kube-*")}
	}
	if g.pct(15) {
		m["labelSelector"] = g.selector()
	}
	if g.pct(12) {
		m["namespaceSelector"] = g.selector()
	}
	if g.pct(10) {
		m["name"] = g.pick("web-*", "api", "*-job", "db")
	}
	if g.pct(12) {
		m["source"] = g.pick("All", "Original", "Generated")
	}
	return m
}

func (g *gen) selector() map[string]any {
	if g.pct(2) {
		return map[string]any{"matchLabels": map[string]any{"bad key!": "x"}} // an invalid selector
	}
	if g.pct(60) {
		return map[string]any{"matchLabels": map[string]any{g.pick(labelKeys...): g.pick(labelValues...)}}
	}
	op := g.pick("In", "NotIn", "Exists", "DoesNotExist")
	e := map[string]any{"key": g.pick(labelKeys...), "operator": op}
	if op == "In" || op == "NotIn" {
		e["values"] = []any{g.pick(labelValues...), g.pick(labelValues...)}
	}
	return map[string]any{"matchExpressions": []any{e}}
}

// podPrefix is the Pod spec location for the object kind, sometimes another kind's.
func (g *gen) podPrefix(ok objectKind) string {
	if ok.podSpec == "" || g.pct(10) {
		return objectKinds[g.r.IntN(3)].podSpec
	}
	return ok.podSpec
}

func (g *gen) containerSel() string {
	if g.pct(50) {
		return "*"
	}
	return g.pick(containerNames...)
}

func (g *gen) containerList() string {
	if g.pct(75) {
		return "containers"
	}
	return "initContainers"
}

func (g *gen) assign(ok objectKind) map[string]any {
	p := g.podPrefix(ok)
	cl, cs := g.containerList(), g.containerSel()
	var loc string
	var value any
	switch g.r.IntN(14) {
	case 0:
		loc, value = fmt.Sprintf("%s.%s[name: %s].imagePullPolicy", p, cl, cs), g.pick("Always", "IfNotPresent")
	case 1:
		loc, value = fmt.Sprintf("%s.%s[name: %s].securityContext.privileged", p, cl, cs), g.pct(50)
	case 2:
		name := g.pick(containerNames...)
		el := map[string]any{"name": name, "image": g.pick(images...)}
		if g.pct(40) {
			el["imagePullPolicy"] = "Always"
		}
		if g.pct(5) {
			el["name"] = "other" // a key that differs from the location's
		}
		loc, value = fmt.Sprintf("%s.%s[name: %s]", p, cl, name), el
	case 3:
		loc, value = fmt.Sprintf("%s.%s[name: %s].env[name: %s].value", p, cl, cs, g.pick(envNames...)), g.pick("info", "debug")
	case 4:
		env := g.pick(envNames...)
		loc, value = fmt.Sprintf("%s.%s[name: %s].env[name: %s]", p, cl, g.pick(containerNames...), env), map[string]any{"name": env, "value": "on"}
	case 5:
		loc, value = fmt.Sprintf("%s.%s[name: %s].ports[containerPort: %d].protocol", p, cl, cs, []int{80, 443, 9090}[g.r.IntN(3)]), g.pick("TCP", "UDP")
	case 6:
		loc, value = fmt.Sprintf("%s.tolerations[key: %s].operator", p, g.pick("dedicated", "gpu", "*")), g.pick("Exists", "Equal")
	case 7:
		v := g.pick(volumeNames...)
		loc, value = fmt.Sprintf("%s.volumes[name: %s]", p, v), map[string]any{"name": v, "emptyDir": map[string]any{"medium": "Memory"}}
	case 8:
		loc, value = p+".priority", int64(g.n(1, 2))
	case 9:
		loc, value = p+"."+g.pick("dnsPolicy", "serviceAccountName"), g.pick("None", "Default", "builder")
	case 10:
		loc, value = fmt.Sprintf("%s.%s[name: %s].volumeMounts[mountPath: %q].readOnly", p, cl, cs, g.pick("/data", "/cache")), true
	case 11:
		loc, value = "spec.replicas", int64(g.n(1, 3))
	case 12:
		loc, value = p+".securityContext.runAsNonRoot", g.pct(50)
	default:
		loc, value = fmt.Sprintf("%s.%s[name: %s].resources.limits.cpu", p, cl, cs), g.pick("100m", "1")
	}
	m := g.head("Assign", ok, loc)
	assign := map[string]any{"value": value}
	if _, isString := value.(string); isString && g.pct(15) {
		assign = map[string]any{"fromMetadata": map[string]any{"field": g.pick("name", "namespace")}}
	}
	params := map[string]any{"assign": assign}
	if tests := g.pathTests(loc); tests != nil {
		params["pathTests"] = tests
	}
	m["spec"].(map[string]any)["parameters"] = params
	return m
}

func (g *gen) modifySet(ok objectKind) map[string]any {
	p := g.podPrefix(ok)
	field := g.pick("args", "args", "command")
	loc := fmt.Sprintf("%s.%s[name: %s].%s", p, g.containerList(), g.containerSel(), field)
	var from []any
	for range g.n(1, 3) {
		from = append(from, g.pick(args...))
	}
	params := map[string]any{"values": map[string]any{"fromList": from}}
	if g.pct(70) {
		params["operation"] = g.pick("merge", "prune", "prune")
	}
	if tests := g.pathTests(loc); tests != nil {
		params["pathTests"] = tests
	}
	m := g.head("ModifySet", ok, loc)
	m["spec"].(map[string]any)["parameters"] = params
	return m
}

func (g *gen) assignImage(ok objectKind) map[string]any {
	p := g.podPrefix(ok)
	loc := fmt.Sprintf("%s.%s[name: %s].image", p, g.containerList(), g.containerSel())
	params := map[string]any{}
	for len(params) == 0 || g.pct(30) {
		switch g.r.IntN(3) {
		case 0:
			params["assignDomain"] = g.pick("gcr.io", "my.registry.io:5000", "localhost", "localhost:5000", "docker.io", "gcr.io", g.pick("registry:5000", "a.b/c"))
		case 1:
			params["assignPath"] = g.pick("app", "repo/app", "library/nginx", "foo.bar", "app", g.pick("my.repo.lib/app", "Bad/Path", "a/"))
		default:
			params["assignTag"] = g.pick(":v2", ":latest", digest, ":v2", g.pick("v2", "@sha256:short", ":1.0"+digest))
		}
		if g.pct(2) {
			params = map[string]any{}
			break
		}
	}
	if tests := g.pathTests(loc); tests != nil {
		params["pathTests"] = tests
	}
	m := g.head("AssignImage", ok, loc)
	m["spec"].(map[string]any)["parameters"] = params
	return m
}

// misfit returns a mutator whose location does not fit the object's schema (a list
// addressed as an object, a string as a list, or a list keyed by another field): it
// fails at request time or conflicts with the other mutators' schema.
func (g *gen) misfit(ok objectKind) map[string]any {
	p := g.podPrefix(ok)
	switch g.r.IntN(4) {
	case 0:
		m := g.head("Assign", ok, p+".containers.image")
		m["spec"].(map[string]any)["parameters"] = map[string]any{"assign": map[string]any{"value": "nginx"}}
		return m
	case 1:
		m := g.head("ModifySet", ok, fmt.Sprintf("%s.containers[name: %s].image", p, g.containerSel()))
		m["spec"].(map[string]any)["parameters"] = map[string]any{"values": map[string]any{"fromList": []any{"x"}}}
		return m
	case 2:
		m := g.head("AssignImage", ok, fmt.Sprintf("%s.containers[name: %s].ports", p, g.containerSel()))
		m["spec"].(map[string]any)["parameters"] = map[string]any{"assignTag": ":v1"}
		return m
	default:
		m := g.head("Assign", ok, fmt.Sprintf("%s.containers[image: nginx].imagePullPolicy", p))
		m["spec"].(map[string]any)["parameters"] = map[string]any{"assign": map[string]any{"value": "Always"}}
		return m
	}
}

func (g *gen) assignMetadata() map[string]any {
	loc := fmt.Sprintf("metadata.%s.%s", g.pick("labels", "annotations"), g.pick(labelKeys...))
	if g.pct(4) {
		loc = g.pick("metadata.name", "metadata.labels", "spec.x")
	}
	var assign map[string]any
	switch {
	case g.pct(20):
		assign = map[string]any{"fromMetadata": map[string]any{"field": g.pick("name", "namespace")}}
	case g.pct(4):
		assign = map[string]any{"value": int64(1)}
	default:
		assign = map[string]any{"value": g.pick(labelValues...)}
	}
	m := g.head("AssignMetadata", objectKind{}, loc)
	m["spec"].(map[string]any)["parameters"] = map[string]any{"assign": assign}
	return m
}

// pathTests returns zero to three tests on prefixes of loc (sometimes with a glob
// replaced by a name, which Gatekeeper refuses), or nil.
func (g *gen) pathTests(loc string) []any {
	if !g.pct(35) {
		return nil
	}
	prefixes := locationPrefixes(loc)
	var tests []any
	used := map[string]bool{}
	for range g.n(1, 3) {
		sub := prefixes[g.r.IntN(len(prefixes))]
		if used[sub] && !g.pct(10) {
			continue // rarely, two tests of one path (which must agree)
		}
		used[sub] = true
		if g.pct(8) {
			sub = strings.Replace(sub, "[name: *]", "[name: app]", 1)
		}
		tests = append(tests, map[string]any{"subPath": sub, "condition": g.pick("MustExist", "MustNotExist")})
	}
	return tests
}

// locationPrefixes lists the prefixes of a location that end at a node boundary.
func locationPrefixes(loc string) []string {
	var out []string
	depth := 0
	inQuote := false
	for i, ch := range loc {
		switch {
		case ch == '"':
			inQuote = !inQuote
		case inQuote:
		case ch == '[':
			if depth == 0 && i > 0 {
				out = append(out, loc[:i])
			}
			depth++
		case ch == ']':
			depth--
		case ch == '.' && depth == 0:
			out = append(out, loc[:i])
		}
	}
	return append(out, loc)
}
