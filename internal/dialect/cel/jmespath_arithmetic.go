package cel

import (
	"fmt"
	"math"
	"reflect"
	"time"

	"github.com/kyverno/go-jmespath"
	"gopkg.in/inf.v0"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Kyverno's arithmetic functions (add, subtract, multiply, divide, modulo, sum) work
// on three kinds of operand: JSON numbers, Kubernetes quantities ("10Mi", "250m")
// and Go durations ("1h30m"). A string is a quantity when resource.ParseQuantity
// takes it, else a duration when time.ParseDuration takes it ("1m" is therefore a
// thousandth, "1s" a second). What each pair of kinds gives, after Kyverno 1.19.1
// (pkg/engine/jmespath/arithmetic.go), with any other pair a "Types mismatch":
//
//	add, subtract  number±number → number, quantity±quantity → quantity,
//	               duration±duration → duration
//	multiply       number×number → number, quantity×number (either order) →
//	               quantity, duration×number (either order) → duration
//	divide         number÷number → number, quantity÷quantity → number,
//	               quantity÷number → quantity, duration÷duration → number,
//	               duration÷number → duration
//	modulo         number%number → number, quantity%quantity → quantity,
//	               duration%duration → duration; numbers and quantities must be
//	               integers
//
// Quantities and durations are answered as strings, in their canonical form.

// Kyverno's arithmetic errors (pkg/engine/jmespath/error.go).
const (
	jpErrZeroDivision   = jpErrPrefix + "Zero divisor passed"
	jpErrNonIntModulo   = jpErrPrefix + "Non-integer argument(s) passed for modulo"
	jpErrTypesMismatch  = jpErrPrefix + "Types mismatch"
	jpErrInvalidOperand = jpErrPrefix + "invalid operand"
)

// operandKind is what an arithmetic argument is.
type operandKind int

const (
	operandNumber operandKind = iota
	operandQuantity
	operandDuration
)

// operand is one argument of an arithmetic function.
type operand struct {
	kind operandKind
	num  float64
	qty  resource.Quantity
	dur  time.Duration
}

// parseOperand reads argument i of function f: a number, else a string that is a
// quantity, else a string that is a duration.
func parseOperand(f string, args []any, i int) (operand, error) {
	if i < len(args) && args[i] != nil {
		switch v := reflect.ValueOf(args[i]); v.Kind() {
		case reflect.Float64:
			return operand{kind: operandNumber, num: v.Float()}, nil
		case reflect.String:
			if q, err := resource.ParseQuantity(v.String()); err == nil {
				return operand{kind: operandQuantity, qty: q}, nil
			}
			if d, err := time.ParseDuration(v.String()); err == nil {
				return operand{kind: operandDuration, dur: d}, nil
			}
		}
	}
	return operand{}, fmt.Errorf(jpErrInvalidOperand, f)
}

// arithmetic is the handler of a two-operand function named f computing op.
func arithmetic(f string, op func(f string, a, b operand) (any, error)) jmespath.JpFunction {
	return func(args []any) (any, error) {
		a, err := parseOperand(f, args, 0)
		if err != nil {
			return nil, err
		}
		b, err := parseOperand(f, args, 1)
		if err != nil {
			return nil, err
		}
		return op(f, a, b)
	}
}

// bothOf reports whether a and b are both of kind k.
func bothOf(k operandKind, a, b operand) bool { return a.kind == k && b.kind == k }

func addOperands(f string, a, b operand) (any, error) {
	switch {
	case bothOf(operandNumber, a, b):
		return a.num + b.num, nil
	case bothOf(operandQuantity, a, b):
		q := a.qty
		q.Add(b.qty)
		return q.String(), nil
	case bothOf(operandDuration, a, b):
		return (a.dur + b.dur).String(), nil
	}
	return nil, fmt.Errorf(jpErrTypesMismatch, f)
}

func subtractOperands(f string, a, b operand) (any, error) {
	switch {
	case bothOf(operandNumber, a, b):
		return a.num - b.num, nil
	case bothOf(operandQuantity, a, b):
		q := a.qty
		q.Sub(b.qty)
		return q.String(), nil
	case bothOf(operandDuration, a, b):
		return (a.dur - b.dur).String(), nil
	}
	return nil, fmt.Errorf(jpErrTypesMismatch, f)
}

func multiplyOperands(f string, a, b operand) (any, error) {
	if b.kind != operandNumber { // the number, if any, goes right
		a, b = b, a
	}
	if b.kind != operandNumber {
		return nil, fmt.Errorf(jpErrTypesMismatch, f)
	}
	switch a.kind {
	case operandNumber:
		return a.num * b.num, nil
	case operandQuantity:
		n, err := numberAsQuantity(b.num)
		if err != nil {
			return nil, err
		}
		var product inf.Dec
		product.Mul(a.qty.AsDec(), n.AsDec())
		return resource.NewDecimalQuantity(product, a.qty.Format).String(), nil
	default:
		return scaleDuration(a.dur.Seconds() * b.num), nil
	}
}

func divideOperands(f string, a, b operand) (any, error) {
	switch {
	case bothOf(operandNumber, a, b):
		if b.num == 0 {
			return nil, fmt.Errorf(jpErrZeroDivision, f)
		}
		return a.num / b.num, nil
	case bothOf(operandQuantity, a, b):
		divisor := b.qty.AsApproximateFloat64()
		if divisor == 0 {
			return nil, fmt.Errorf(jpErrZeroDivision, f)
		}
		return a.qty.AsApproximateFloat64() / divisor, nil
	case bothOf(operandDuration, a, b):
		if b.dur == 0 {
			return nil, fmt.Errorf(jpErrZeroDivision, f)
		}
		return a.dur.Seconds() / b.dur.Seconds(), nil
	case b.kind == operandNumber && a.kind == operandQuantity:
		if b.num == 0 {
			return nil, fmt.Errorf(jpErrZeroDivision, f)
		}
		n, err := numberAsQuantity(b.num)
		if err != nil {
			return nil, err
		}
		// The quotient keeps the larger of the two scales, rounded toward zero.
		dividend, divisor := a.qty.AsDec(), n.AsDec()
		scale := inf.Scale(math.Max(float64(dividend.Scale()), float64(divisor.Scale())))
		var quotient inf.Dec
		quotient.QuoRound(dividend, divisor, scale, inf.RoundDown)
		return resource.NewDecimalQuantity(quotient, a.qty.Format).String(), nil
	case b.kind == operandNumber && a.kind == operandDuration:
		if b.num == 0 {
			return nil, fmt.Errorf(jpErrZeroDivision, f)
		}
		return scaleDuration(a.dur.Seconds() / b.num), nil
	}
	return nil, fmt.Errorf(jpErrTypesMismatch, f)
}

func moduloOperands(f string, a, b operand) (any, error) {
	switch {
	case bothOf(operandNumber, a, b):
		x, y, err := integerOperands(f, a.num, b.num)
		if err != nil {
			return nil, err
		}
		return float64(x % y), nil
	case bothOf(operandQuantity, a, b):
		x, y, err := integerOperands(f, a.qty.ToDec().AsApproximateFloat64(), b.qty.ToDec().AsApproximateFloat64())
		if err != nil {
			return nil, err
		}
		return resource.NewQuantity(x%y, a.qty.Format).String(), nil
	case bothOf(operandDuration, a, b):
		if b.dur == 0 {
			return nil, fmt.Errorf(jpErrZeroDivision, f)
		}
		return (a.dur % b.dur).String(), nil
	}
	return nil, fmt.Errorf(jpErrTypesMismatch, f)
}

// integerOperands are the operands of a modulo as integers: each must convert to an
// int64 and back unchanged, and the divisor must not be zero.
func integerOperands(f string, x, y float64) (int64, int64, error) {
	ix, iy := int64(x), int64(y)
	if float64(ix) != x || float64(iy) != y {
		return 0, 0, fmt.Errorf(jpErrNonIntModulo, f)
	}
	if iy == 0 {
		return 0, 0, fmt.Errorf(jpErrZeroDivision, f)
	}
	return ix, iy, nil
}

// numberAsQuantity is a JSON number as a quantity, through its shortest decimal
// text (1e+21 stays 1e+21).
func numberAsQuantity(n float64) (resource.Quantity, error) {
	return resource.ParseQuantity(fmt.Sprint(n))
}

// scaleDuration is a number of seconds as a duration's text.
func scaleDuration(seconds float64) string {
	return time.Duration(seconds * float64(time.Second)).String()
}

// jpSum adds the elements of an array from the first on, as add does pairwise (a
// one-element array answers its element, whatever it is).
func jpSum(args []any) (any, error) {
	items, ok := args[0].([]any)
	if !ok {
		return nil, fmt.Errorf(jpErrTypesMismatch, "sum")
	}
	if len(items) == 0 {
		return nil, fmt.Errorf(jpErrGeneric, "sum", "at least one element in the array is required")
	}
	add := arithmetic("sum", addOperands)
	total := items[0]
	for _, item := range items[1:] {
		var err error
		if total, err = add([]any{total, item}); err != nil {
			return nil, err
		}
	}
	return total, nil
}
