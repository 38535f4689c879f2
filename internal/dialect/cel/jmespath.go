package cel

import (
	"context"
	"crypto/md5"  // #nosec G501 -- Kyverno's md5 function
	"crypto/sha1" // #nosec G505 -- Kyverno's sha1 function
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	"github.com/kyverno/go-jmespath"
	regen "github.com/zach-klippenstein/goregen"
	"sigs.k8s.io/yaml"
)

// GlobalContextEntry projections are evaluated as Kyverno 1.19 evaluates them
// (pkg/globalcontext/{k8sresource,externalapi}: jp.Query(projection.jmesPath) with
// the jmespath.Interface of pkg/engine/jmespath): its fork of go-jmespath (a
// dependency of morph) with Kyverno's own functions registered. Those functions live
// in the kyverno module itself, which morph does not depend on (docs/dialects.md says
// why); they are written here and in jmespath_*.go after Kyverno's definitions,
// checked against Kyverno's expected values (jmespath_test.go) and against Kyverno's
// own package (jmespath_differential_test.go).

// jp is the JMESPath function caller with Kyverno's functions; is_external_url
// resolves host names with the system's resolver, as Kyverno does.
var jp = newKyvernoFunctionCaller(net.DefaultResolver.LookupIPAddr)

// searchJMESPath evaluates a projection with Kyverno's JMESPath.
func searchJMESPath(query string, data any) (any, error) {
	q, err := jmespath.Compile(query)
	if err != nil {
		return nil, fmt.Errorf("jmesPath %q: %w", query, err)
	}
	v, err := q.Search(data, jmespath.WithFunctionCaller(jp))
	if err != nil {
		return nil, fmt.Errorf("jmesPath %q: %w", query, err)
	}
	return v, nil
}

type jpArgs = []jmespath.ArgSpec

func jpArg(types ...jmespath.JpType) jmespath.ArgSpec { return jmespath.ArgSpec{Types: types} }

var (
	jpStr = jpArg(jmespath.JpString)
	jpNum = jpArg(jmespath.JpNumber)
	jpObj = jpArg(jmespath.JpObject)
	jpAny = jpArg(jmespath.JpAny)
)

// lookupIPAddr resolves a host name (net.Resolver.LookupIPAddr).
type lookupIPAddr func(ctx context.Context, host string) ([]net.IPAddr, error)

// newKyvernoFunctionCaller registers Kyverno's functions over the fork's built-in
// ones (Kyverno's sum replaces JMESPath's).
func newKyvernoFunctionCaller(lookup lookupIPAddr) *jmespath.FunctionCaller {
	fc := jmespath.NewFunctionCaller()
	for _, f := range kyvernoFunctions(lookup) {
		fc.Register(f)
	}
	return fc
}

// kyvernoFunctions are every one of Kyverno 1.19.1's JMESPath functions
// (pkg/engine/jmespath GetFunctions), is_external_url resolving with lookup.
func kyvernoFunctions(lookup lookupIPAddr) []jmespath.FunctionEntry {
	strOrNum := jpArg(jmespath.JpString, jmespath.JpNumber)
	return []jmespath.FunctionEntry{
		{Name: "compare", Arguments: jpArgs{jpStr, jpStr}, Handler: str2(func(a, b string) (any, error) { return strings.Compare(a, b), nil })},
		{Name: "equal_fold", Arguments: jpArgs{jpStr, jpStr}, Handler: str2(func(a, b string) (any, error) { return strings.EqualFold(a, b), nil })},
		{Name: "replace", Arguments: jpArgs{jpStr, jpStr, jpStr, jpNum}, Handler: jpReplace},
		{Name: "replace_all", Arguments: jpArgs{jpStr, jpStr, jpStr}, Handler: jpReplaceAll},
		{Name: "to_upper", Arguments: jpArgs{jpStr}, Handler: str1("to_upper", strings.ToUpper)},
		{Name: "to_lower", Arguments: jpArgs{jpStr}, Handler: str1("to_lower", strings.ToLower)},
		{Name: "trim", Arguments: jpArgs{jpStr, jpStr}, Handler: str2(func(a, b string) (any, error) { return strings.Trim(a, b), nil })},
		{Name: "trim_prefix", Arguments: jpArgs{jpStr, jpStr}, Handler: str2(func(a, b string) (any, error) { return strings.TrimPrefix(a, b), nil })},
		{Name: "split", Arguments: jpArgs{jpStr, jpStr}, Handler: str2(func(a, b string) (any, error) {
			parts := strings.Split(a, b)
			out := make([]any, len(parts))
			for i, p := range parts {
				out[i] = p
			}
			return out, nil
		})},
		{Name: "regex_replace_all", Arguments: jpArgs{jpStr, strOrNum, strOrNum}, Handler: jpRegexReplace("regex_replace_all", false)},
		{Name: "regex_replace_all_literal", Arguments: jpArgs{jpStr, strOrNum, strOrNum}, Handler: jpRegexReplace("regex_replace_all_literal", true)},
		{Name: "regex_match", Arguments: jpArgs{jpStr, strOrNum}, Handler: jpRegexMatch},
		{Name: "pattern_match", Arguments: jpArgs{jpStr, strOrNum}, Handler: jpPatternMatch},
		{Name: "label_match", Arguments: jpArgs{jpObj, jpObj}, Handler: jpLabelMatch},
		{Name: "to_boolean", Arguments: jpArgs{jpStr}, Handler: jpToBoolean},
		{Name: "add", Arguments: jpArgs{jpAny, jpAny}, Handler: arithmetic("add", addOperands)},
		{Name: "sum", Arguments: jpArgs{jpArg(jmespath.JpArray)}, Handler: jpSum},
		{Name: "subtract", Arguments: jpArgs{jpAny, jpAny}, Handler: arithmetic("subtract", subtractOperands)},
		{Name: "multiply", Arguments: jpArgs{jpAny, jpAny}, Handler: arithmetic("multiply", multiplyOperands)},
		{Name: "divide", Arguments: jpArgs{jpAny, jpAny}, Handler: arithmetic("divide", divideOperands)},
		{Name: "modulo", Arguments: jpArgs{jpAny, jpAny}, Handler: arithmetic("modulo", moduloOperands)},
		{Name: "round", Arguments: jpArgs{jpNum, jpNum}, Handler: jpRound},
		{Name: "base64_decode", Arguments: jpArgs{jpStr}, Handler: func(args []any) (any, error) {
			s, err := jpString("", args, 0)
			if err != nil {
				return nil, err
			}
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				return nil, err
			}
			return string(b), nil
		}},
		{Name: "base64_encode", Arguments: jpArgs{jpStr}, Handler: str1("", func(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) })},
		{Name: "path_canonicalize", Arguments: jpArgs{jpStr}, Handler: str1("path_canonicalize", func(s string) string { return filepath.Join(s) })},
		{Name: "truncate", Arguments: jpArgs{jpStr, jpNum}, Handler: jpTruncate},
		{Name: "semver_compare", Arguments: jpArgs{jpStr, jpStr}, Handler: str2(func(v, r string) (any, error) {
			version, _ := semver.Parse(v)
			expected, err := semver.ParseRange(r)
			if err != nil {
				return nil, err
			}
			return expected(version), nil
		})},
		{Name: "parse_json", Arguments: jpArgs{jpStr}, Handler: func(args []any) (any, error) {
			s, err := jpString("parse_json", args, 0)
			if err != nil {
				return nil, err
			}
			var out any
			err = json.Unmarshal([]byte(s), &out)
			return out, err
		}},
		{Name: "parse_yaml", Arguments: jpArgs{jpStr}, Handler: func(args []any) (any, error) {
			s, err := jpString("parse_yaml", args, 0)
			if err != nil {
				return nil, err
			}
			j, err := yaml.YAMLToJSON([]byte(s))
			if err != nil {
				return nil, err
			}
			var out any
			err = json.Unmarshal(j, &out)
			return out, err
		}},
		{Name: "lookup", Arguments: jpArgs{jpArg(jmespath.JpObject, jmespath.JpArray), strOrNum}, Handler: jpLookup},
		{Name: "items", Arguments: jpArgs{jpArg(jmespath.JpObject, jmespath.JpArray), jpStr, jpStr}, Handler: jpItems},
		{Name: "object_from_lists", Arguments: jpArgs{jpArg(jmespath.JpArray), jpArg(jmespath.JpArray)}, Handler: jpObjectFromLists},
		{Name: "random", Arguments: jpArgs{jpStr}, Handler: jpRandom},
		{Name: "x509_decode", Arguments: jpArgs{jpStr}, Handler: jpX509Decode},
		{Name: "image_normalize", Arguments: jpArgs{jpStr}, Handler: jpImageNormalize},
		{Name: "is_external_url", Arguments: jpArgs{jpStr}, Handler: jpIsExternalURL(lookup)},
		{Name: "sha256", Arguments: jpArgs{jpStr}, Handler: str1("", func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) })},
		{Name: "sha1", Arguments: jpArgs{jpStr}, Handler: str1("", func(s string) string { h := sha1.Sum([]byte(s)); return hex.EncodeToString(h[:]) })}, // #nosec G401
		{Name: "md5", Arguments: jpArgs{jpStr}, Handler: str1("", func(s string) string { h := md5.Sum([]byte(s)); return hex.EncodeToString(h[:]) })},   // #nosec G401
		{Name: "time_since", Arguments: jpArgs{jpStr, jpStr, jpStr}, Handler: jpTimeSince},
		{Name: "time_now", Handler: func([]any) (any, error) { return time.Now().Format(time.RFC3339), nil }},
		{Name: "time_now_utc", Handler: func([]any) (any, error) { return time.Now().UTC().Format(time.RFC3339), nil }},
		{Name: "time_to_cron", Arguments: jpArgs{jpStr}, Handler: jpTimes("time_to_cron", 1, func(t []time.Time) any {
			return fmt.Sprintf("%d %d %d %d %d", t[0].Minute(), t[0].Hour(), t[0].Day(), int(t[0].Month()), int(t[0].Weekday()))
		})},
		{Name: "time_add", Arguments: jpArgs{jpStr, jpStr}, Handler: jpTimeDuration("time_add", time.Time.Add)},
		{Name: "time_truncate", Arguments: jpArgs{jpStr, jpStr}, Handler: jpTimeDuration("time_truncate", time.Time.Truncate)},
		{Name: "time_parse", Arguments: jpArgs{jpStr, jpStr}, Handler: jpTimeParse},
		{Name: "time_utc", Arguments: jpArgs{jpStr}, Handler: jpTimes("time_utc", 1, func(t []time.Time) any { return t[0].UTC().Format(time.RFC3339) })},
		{Name: "time_diff", Arguments: jpArgs{jpStr, jpStr}, Handler: jpTimes("time_diff", 2, func(t []time.Time) any { return t[1].Sub(t[0]).String() })},
		{Name: "time_before", Arguments: jpArgs{jpStr, jpStr}, Handler: jpTimes("time_before", 2, func(t []time.Time) any { return t[0].Before(t[1]) })},
		{Name: "time_after", Arguments: jpArgs{jpStr, jpStr}, Handler: jpTimes("time_after", 2, func(t []time.Time) any { return t[0].After(t[1]) })},
		{Name: "time_between", Arguments: jpArgs{jpStr, jpStr, jpStr}, Handler: jpTimes("time_between", 3, func(t []time.Time) any { return t[0].After(t[1]) && t[0].Before(t[2]) })},
	}
}

// Errors as Kyverno words them (pkg/engine/jmespath/error.go).
const (
	jpErrPrefix      = "JMESPath function '%s': "
	jpErrInvalidType = jpErrPrefix + "argument #%d is not of type %s"
	jpErrGeneric     = jpErrPrefix + "%s"
	jpErrOutOfBounds = jpErrPrefix + "%d argument is out of bounds (%d)"
)

// jpValue checks an argument's kind as Kyverno's validateArg does.
func jpValue(f string, args []any, i int, kind reflect.Kind) (reflect.Value, error) {
	if i >= len(args) {
		return reflect.Value{}, fmt.Errorf(jpErrOutOfBounds, f, i+1, len(args))
	}
	if args[i] == nil {
		return reflect.Value{}, fmt.Errorf(jpErrInvalidType, f, i+1, kind.String())
	}
	v := reflect.ValueOf(args[i])
	if v.Kind() != kind {
		return reflect.Value{}, fmt.Errorf(jpErrInvalidType, f, i+1, kind.String())
	}
	return v, nil
}

func jpString(f string, args []any, i int) (string, error) {
	v, err := jpValue(f, args, i, reflect.String)
	if err != nil {
		return "", err
	}
	return v.String(), nil
}

func jpNumber(f string, args []any, i int) (float64, error) {
	v, err := jpValue(f, args, i, reflect.Float64)
	if err != nil {
		return 0, err
	}
	return v.Float(), nil
}

func str1(name string, fn func(string) string) jmespath.JpFunction {
	return func(args []any) (any, error) {
		s, err := jpString(name, args, 0)
		if err != nil {
			return nil, err
		}
		return fn(s), nil
	}
}

func str2(fn func(a, b string) (any, error)) jmespath.JpFunction {
	return func(args []any) (any, error) {
		a, err := jpString("", args, 0)
		if err != nil {
			return nil, err
		}
		b, err := jpString("", args, 1)
		if err != nil {
			return nil, err
		}
		return fn(a, b)
	}
}

func jpReplace(args []any) (any, error) {
	s, err := jpString("replace", args, 0)
	if err != nil {
		return nil, err
	}
	old, err := jpString("replace", args, 1)
	if err != nil {
		return nil, err
	}
	repl, err := jpString("replace", args, 2)
	if err != nil {
		return nil, err
	}
	n, err := jpNumber("replace", args, 3)
	if err != nil {
		return nil, err
	}
	return strings.Replace(s, old, repl, int(n)), nil
}

func jpReplaceAll(args []any) (any, error) {
	s, err := jpString("replace_all", args, 0)
	if err != nil {
		return nil, err
	}
	old, err := jpString("replace_all", args, 1)
	if err != nil {
		return nil, err
	}
	repl, err := jpString("replace_all", args, 2)
	if err != nil {
		return nil, err
	}
	return strings.ReplaceAll(s, old, repl), nil
}

// jpToString converts a string or number argument as Kyverno's ifaceToString does
// (numbers formatted with float32 precision).
func jpToString(v any) (string, error) {
	switch i := v.(type) {
	case int:
		return strconv.Itoa(i), nil
	case float64:
		return strconv.FormatFloat(i, 'f', -1, 32), nil
	case float32:
		return strconv.FormatFloat(float64(i), 'f', -1, 32), nil
	case string:
		return i, nil
	case bool:
		return strconv.FormatBool(i), nil
	}
	return "", fmt.Errorf("error, undefined type cast")
}

func jpRegexReplace(name string, literal bool) jmespath.JpFunction {
	return func(args []any) (any, error) {
		expr, err := jpString(name, args, 0)
		if err != nil {
			return nil, err
		}
		src, err := jpToString(args[1])
		if err != nil {
			return nil, fmt.Errorf(jpErrInvalidType, name, 2, "String or Real")
		}
		repl, err := jpToString(args[2])
		if err != nil {
			return nil, fmt.Errorf(jpErrInvalidType, name, 3, "String or Real")
		}
		re, err := regexp.Compile(expr)
		if err != nil {
			return nil, fmt.Errorf(jpErrGeneric, name, err.Error())
		}
		if literal {
			return re.ReplaceAllLiteralString(src, repl), nil
		}
		return re.ReplaceAllString(src, repl), nil
	}
}

// jpMatchArgs reads the arguments of regex_match and pattern_match: a pattern string
// and a string or number. Kyverno names both functions' errors regex_match.
func jpMatchArgs(args []any) (pattern, src string, err error) {
	if pattern, err = jpString("regex_match", args, 0); err != nil {
		return "", "", err
	}
	if src, err = jpToString(args[1]); err != nil {
		return "", "", fmt.Errorf(jpErrInvalidType, "regex_match", 2, "String or Real")
	}
	return pattern, src, nil
}

func jpRegexMatch(args []any) (any, error) {
	expr, src, err := jpMatchArgs(args)
	if err != nil {
		return nil, err
	}
	return regexp.MatchString(expr, src)
}

// jpPatternMatch is Kyverno's pattern_match: the wildcard pattern ("*" any run of
// characters, "?" exactly one) matches the whole string or number.
func jpPatternMatch(args []any) (any, error) {
	pattern, src, err := jpMatchArgs(args)
	if err != nil {
		return nil, err
	}
	return wildcardMatch(pattern, src), nil
}

// wildcardMatch reports whether name matches pattern as a whole, rune by rune: "*"
// matches any run of runes (none too), "?" exactly one, any other rune itself (the
// github.com/IGLOU-EU/go-wildcard v1 Match Kyverno uses, without its exponential
// backtracking: on a mismatch only the last "*" needs to take one more rune).
func wildcardMatch(pattern, name string) bool {
	p, s := []rune(pattern), []rune(name)
	pi, si := 0, 0
	star, starAt := -1, 0 // the last "*" seen and where its run ends in s
	for si < len(s) {
		switch {
		case pi < len(p) && p[pi] == '*':
			star, starAt = pi, si
			pi++
		case pi < len(p) && (p[pi] == '?' || p[pi] == s[si]):
			pi++
			si++
		case star >= 0:
			starAt++
			pi, si = star+1, starAt
		default:
			return false
		}
	}
	for pi < len(p) && p[pi] == '*' {
		pi++
	}
	return pi == len(p)
}

// jpRandom is Kyverno's random: a string the regular expression matches, drawn at
// random by github.com/zach-klippenstein/goregen (the generator Kyverno and its CEL
// random() use; it is what decides, for instance, that "a*" repeats at most 10 times).
// Not deterministic: a projection using it changes at every evaluation.
func jpRandom(args []any) (any, error) {
	pattern, err := jpString("random", args, 0)
	if err != nil {
		return nil, err
	}
	if pattern == "" {
		return nil, errors.New("no pattern provided")
	}
	return regen.Generate(pattern)
}

// jpIsExternalURL is Kyverno's is_external_url: whether the URL's host is neither a
// loopback nor a private address. A host name is resolved (with lookup) and is
// external only when none of its addresses is loopback or private; a name that does
// not resolve is an error. Kyverno names its argument errors path_canonicalize.
func jpIsExternalURL(lookup lookupIPAddr) jmespath.JpFunction {
	return func(args []any) (any, error) {
		s, err := jpString("path_canonicalize", args, 0)
		if err != nil {
			return nil, err
		}
		u, err := url.Parse(s)
		if err != nil {
			return nil, err
		}
		internal := func(ip net.IP) bool { return ip.IsLoopback() || ip.IsPrivate() }
		if ip := net.ParseIP(u.Hostname()); ip != nil {
			return !internal(ip), nil
		}
		addrs, err := lookup(context.Background(), u.Hostname())
		if err != nil {
			return nil, err
		}
		for _, a := range addrs {
			if internal(a.IP) {
				return false, nil
			}
		}
		return true, nil
	}
}

func jpLabelMatch(args []any) (any, error) {
	labels, ok := args[0].(map[string]any)
	if !ok {
		return nil, fmt.Errorf(jpErrInvalidType, "label_match", 0, "Object")
	}
	match, ok := args[1].(map[string]any)
	if !ok {
		return nil, fmt.Errorf(jpErrInvalidType, "label_match", 1, "Object")
	}
	for k, v := range labels {
		if got, ok := match[k]; !ok || !reflect.DeepEqual(got, v) {
			return false, nil
		}
	}
	return true, nil
}

func jpToBoolean(args []any) (any, error) {
	s, err := jpString("to_boolean", args, 0)
	if err != nil {
		return nil, err
	}
	switch strings.ToLower(s) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return nil, fmt.Errorf(jpErrGeneric, "to_boolean", fmt.Sprintf("lowercase argument must be 'true' or 'false' (provided: '%s')", s))
}

// jpInt is Kyverno's intNumber.
func jpInt(n float64) (int, error) {
	if math.IsInf(n, 0) || math.IsNaN(n) || math.Trunc(n) != n {
		return 0, fmt.Errorf("expected an integer number but got: %g", n)
	}
	i := int(n)
	if float64(i) != n {
		return 0, fmt.Errorf("number is outside the range of integer numbers: %g", n)
	}
	return i, nil
}

func jpRound(args []any) (any, error) {
	x, err := jpNumber("round", args, 0)
	if err != nil {
		return nil, err
	}
	l, err := jpNumber("round", args, 1)
	if err != nil {
		return nil, err
	}
	n, err := jpInt(l)
	if err != nil {
		return nil, fmt.Errorf(jpErrPrefix+"Non-integer argument(s) passed for round off", "round")
	}
	if n < 0 {
		return nil, fmt.Errorf(jpErrGeneric, "round", "the number of decimal places must not be negative")
	}
	shift := math.Pow(10, float64(n))
	return math.Round(x*shift) / shift, nil
}

// jpTruncate keeps the first length characters (runes), as Kyverno's truncate with
// github.com/aquilax/truncate's CutStrategy.
func jpTruncate(args []any) (any, error) {
	s, err := jpString("truncate", args, 0)
	if err != nil {
		return nil, err
	}
	l, err := jpNumber("truncate", args, 1)
	if err != nil {
		return nil, err
	}
	n := int(math.Max(l, 0))
	r := []rune(s)
	if n >= len(r) {
		return s, nil
	}
	return string(r[:n]), nil
}

func jpLookup(args []any) (any, error) {
	switch in := args[0].(type) {
	case map[string]any:
		key, ok := args[1].(string)
		if !ok {
			return nil, fmt.Errorf(jpErrInvalidType, "lookup", 2, "String")
		}
		return in[key], nil
	case []any:
		key, ok := args[1].(float64)
		if !ok {
			return nil, fmt.Errorf(jpErrInvalidType, "lookup", 2, "Number")
		}
		i, err := jpInt(key)
		if err != nil {
			return nil, fmt.Errorf("JMESPath function 'lookup': argument #2: %s", err.Error())
		}
		if i < 0 || i > len(in)-1 {
			return nil, nil
		}
		return in[i], nil
	}
	return nil, fmt.Errorf(jpErrInvalidType, "lookup", 1, "Object or Array")
}

// jpItems answers a []map[string]any, not a []any, as Kyverno's does: functions that
// want an array of any (sum, lookup) refuse it.
func jpItems(args []any) (any, error) {
	keyName, ok := args[1].(string)
	if !ok {
		return nil, fmt.Errorf(jpErrInvalidType, "items", 2, "String")
	}
	valName, ok := args[2].(string)
	if !ok {
		return nil, fmt.Errorf(jpErrInvalidType, "items", 3, "String")
	}
	switch in := args[0].(type) {
	case map[string]any:
		keys := make([]string, 0, len(in))
		for k := range in {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		out := make([]map[string]any, 0, len(in))
		for _, k := range keys {
			out = append(out, map[string]any{keyName: k, valName: in[k]})
		}
		return out, nil
	case []any:
		out := make([]map[string]any, 0, len(in))
		for i, v := range in {
			out = append(out, map[string]any{keyName: float64(i), valName: v})
		}
		return out, nil
	}
	return nil, fmt.Errorf(jpErrInvalidType, "items", 1, "Object or Array")
}

func jpObjectFromLists(args []any) (any, error) {
	keys, ok := args[0].([]any)
	if !ok {
		return nil, fmt.Errorf(jpErrInvalidType, "object_from_lists", 1, "Array")
	}
	values, ok := args[1].([]any)
	if !ok {
		return nil, fmt.Errorf(jpErrInvalidType, "object_from_lists", 2, "Array")
	}
	out := map[string]any{}
	for i, k := range keys {
		key, err := jpToString(k)
		if err != nil {
			return nil, fmt.Errorf(jpErrInvalidType, "object_from_lists", 1, "StringArray")
		}
		if i < len(values) {
			out[key] = values[i]
		} else {
			out[key] = nil
		}
	}
	return out, nil
}

// jpTimes parses n RFC 3339 arguments, then answers fn.
func jpTimes(name string, n int, fn func([]time.Time) any) jmespath.JpFunction {
	return func(args []any) (any, error) {
		ts := make([]time.Time, n)
		for i := range ts {
			s, err := jpString(name, args, i)
			if err != nil {
				return nil, err
			}
			if ts[i], err = time.Parse(time.RFC3339, s); err != nil {
				return nil, err
			}
		}
		return fn(ts), nil
	}
}

// jpTimeDuration is time_add and time_truncate: an RFC 3339 time and a duration.
func jpTimeDuration(name string, fn func(time.Time, time.Duration) time.Time) jmespath.JpFunction {
	return func(args []any) (any, error) {
		s, err := jpString(name, args, 0)
		if err != nil {
			return nil, err
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			return nil, err
		}
		ds, err := jpString(name, args, 1)
		if err != nil {
			return nil, err
		}
		d, err := time.ParseDuration(ds)
		if err != nil {
			return nil, err
		}
		return fn(t, d).Format(time.RFC3339), nil
	}
}

func jpTimeSince(args []any) (any, error) {
	var s [3]string
	for i := range s {
		v, err := jpString("time_since", args, i)
		if err != nil {
			return nil, err
		}
		s[i] = v
	}
	layout := s[0]
	if layout == "" {
		layout = time.RFC3339
	}
	t1, err := time.Parse(layout, s[1])
	if err != nil {
		return nil, err
	}
	t2 := time.Now()
	if s[2] != "" {
		if t2, err = time.Parse(layout, s[2]); err != nil {
			return nil, err
		}
	}
	return t2.Sub(t1).String(), nil
}

func jpTimeParse(args []any) (any, error) {
	layout, err := jpString("time_parse", args, 0)
	if err != nil {
		return nil, err
	}
	ts, err := jpString("time_parse", args, 1)
	if err != nil {
		return nil, err
	}
	if _, err := strconv.ParseInt(layout, 10, 64); err == nil { // an epoch layout
		epoch, err := strconv.ParseInt(ts, 10, 64)
		if err != nil {
			return nil, err
		}
		return time.Unix(epoch, 0).UTC().Format(time.RFC3339), nil
	}
	t, err := time.Parse(layout, ts)
	if err != nil {
		return nil, err
	}
	return t.Format(time.RFC3339), nil
}
