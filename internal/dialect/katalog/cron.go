package katalog

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// cronFields are the keys of a cron map, in expression order.
var cronFields = [5]string{"minute", "hour", "dayOfMonth", "month", "dayOfWeek"}

// cronBounds are the allowed values of each field.
var cronBounds = [5]struct{ lo, hi int }{{0, 59}, {0, 23}, {1, 31}, {1, 12}, {0, 7}}

var (
	monthNames = []string{"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"}
	dayNames   = []string{"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"}
)

// cronMacro expands the standard macros to their five-field form.
func cronMacro(s string) (string, bool) {
	switch strings.ToLower(s) {
	case "@yearly", "@annually":
		return "0 0 1 1 *", true
	case "@monthly":
		return "0 0 1 * *", true
	case "@weekly":
		return "0 0 * * 0", true
	case "@daily", "@midnight":
		return "0 0 * * *", true
	case "@hourly":
		return "0 * * * *", true
	}
	return "", false
}

// parseCron checks a cron expression (five fields or a macro) and returns its fields.
// Field texts are kept as written, so that a map converts back to the same expression.
func parseCron(expr string) ([5]string, error) {
	var out [5]string
	s := strings.TrimSpace(expr)
	if strings.HasPrefix(s, "@") {
		m, ok := cronMacro(s)
		if !ok {
			return out, fmt.Errorf("cron expression %q: unknown macro: use @hourly, @daily, @weekly, @monthly, @yearly or @annually", expr)
		}
		s = m
	}
	fields := strings.Fields(s)
	if len(fields) != 5 {
		return out, fmt.Errorf("cron expression %q has %d fields: want 5 (minute hour dayOfMonth month dayOfWeek) or a macro such as @daily", expr, len(fields))
	}
	for i, f := range fields {
		if err := checkCronField(i, f); err != nil {
			return out, fmt.Errorf("cron expression %q: %s %q: %w", expr, cronFields[i], f, err)
		}
		out[i] = f
	}
	return out, nil
}

// checkCronField checks one field: a comma-separated list of *, N, N-M, each with an
// optional /STEP; names for months and days of the week; ? in the day fields.
func checkCronField(i int, f string) error {
	if f == "?" && (i == 2 || i == 4) {
		return nil
	}
	for _, item := range strings.Split(f, ",") {
		rng, step, hasStep := strings.Cut(item, "/")
		if hasStep {
			n, err := strconv.Atoi(step)
			if err != nil || n <= 0 {
				return fmt.Errorf("step %q is not a positive number", step)
			}
		}
		if rng == "*" {
			continue
		}
		lo, hi, isRange := strings.Cut(rng, "-")
		a, err := cronValue(i, lo)
		if err != nil {
			return err
		}
		if isRange {
			b, err := cronValue(i, hi)
			if err != nil {
				return err
			}
			if b < a {
				return fmt.Errorf("range %q runs backwards", rng)
			}
		}
	}
	return nil
}

func cronValue(i int, s string) (int, error) {
	var names []string
	switch i {
	case 3:
		names = monthNames
	case 4:
		names = dayNames
	}
	if j := slices.Index(names, strings.ToUpper(s)); j >= 0 {
		if i == 3 {
			return j + 1, nil
		}
		return j, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", s)
	}
	if b := cronBounds[i]; n < b.lo || n > b.hi {
		return 0, fmt.Errorf("%d is out of range %d-%d", n, b.lo, b.hi)
	}
	return n, nil
}

// cronToMap turns a cron expression into {minute, hour, dayOfMonth, month, dayOfWeek},
// with string values. Macros become their five-field form. An empty or absent
// expression gives nil, so that an absent field stays absent after conversion.
func cronToMap(v any) (any, error) {
	s, ok := v.(string)
	if !ok {
		if v == nil {
			return nil, nil
		}
		return nil, fmt.Errorf("want a cron expression string, found %s", describe(v))
	}
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	f, err := parseCron(s)
	if err != nil {
		return nil, fmt.Errorf("%w", err)
	}
	m := make(map[string]any, 5)
	for i, k := range cronFields {
		m[k] = f[i]
	}
	return m, nil
}

// cronFromMap turns a cron map back into a five-field expression. A missing field is
// "*"; numbers are accepted as field values; an unknown key is an error. An empty or
// absent map gives "".
func cronFromMap(v any) (string, error) {
	if v == nil {
		return "", nil
	}
	if s, ok := v.(string); ok && s == "" {
		return "", nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return "", fmt.Errorf("want a map with minute, hour, dayOfMonth, month and dayOfWeek, found %s", describe(v))
	}
	if len(m) == 0 {
		return "", nil
	}
	for k := range m {
		if !slices.Contains(cronFields[:], k) {
			return "", fmt.Errorf("unknown key %q: the keys are minute, hour, dayOfMonth, month and dayOfWeek", k)
		}
	}
	parts := make([]string, 5)
	for i, k := range cronFields {
		switch x := m[k].(type) {
		case nil:
			parts[i] = "*"
		case string:
			parts[i] = strings.TrimSpace(x)
		case int64:
			parts[i] = strconv.FormatInt(x, 10)
		default:
			return "", fmt.Errorf("%s is %s: want a string", k, describe(x))
		}
	}
	expr := strings.Join(parts, " ")
	if _, err := parseCron(expr); err != nil {
		return "", fmt.Errorf("%w", err)
	}
	return expr, nil
}

// cronFromAny accepts either form: a string is checked and returned as written, a map
// goes through cronFromMap.
func cronFromAny(v any) (string, error) {
	if s, ok := v.(string); ok {
		if strings.TrimSpace(s) == "" {
			return "", nil
		}
		if _, err := parseCron(s); err != nil {
			return "", fmt.Errorf("%w", err)
		}
		return s, nil
	}
	return cronFromMap(v)
}
