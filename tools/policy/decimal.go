package policy

import (
	"fmt"
	"math/big"
	"reflect"
	"strconv"
	"strings"

	"github.com/google/cel-go/cel"
	"github.com/google/cel-go/common/types"
	"github.com/google/cel-go/common/types/ref"
	"github.com/google/cel-go/common/types/traits"
)

// Decimals. CEL has no decimal type and its doubles cannot hold 1200.10, so
// a JSON number of the arguments never becomes a double: an integer (in
// int64) becomes a CEL int, any other number a Decimal, an exact rational
// parsed from the JSON text (math/big.Rat). A Decimal compares exactly with
// another Decimal, an int or a double on its right; a double literal of a
// rule is read as the shortest decimal that reads back as the same double,
// which is the literal as written for up to 15 significant digits (write
// decimal("...") for more). decimal(x) makes a Decimal of a string, an int,
// a double or a Decimal, so decimal(action.args.amount) works whatever the
// JSON held, including a number written as a string ("1200.10").

// maxExponent bounds the decimal exponent docket parses: 1e999999 would
// otherwise allocate a number of a million digits.
const maxExponent = 400

// decimalName is the CEL name of the type.
const decimalName = "docket.decimal"

var (
	decimalRuntime = types.NewObjectType(decimalName, traits.ComparerType, traits.AdderType)
	// DecimalType is the Decimal's CEL type, for declarations.
	decimalCEL = cel.OpaqueType(decimalName)
)

// Decimal is an exact decimal number as a CEL value.
type Decimal struct{ r *big.Rat }

var _ ref.Val = Decimal{}

// ParseDecimal parses a decimal number (JSON number syntax; surrounding
// spaces and a leading '+' are refused) exactly.
func ParseDecimal(s string) (Decimal, error) {
	if !jsonNumber(s) {
		return Decimal{}, fmt.Errorf("%q is not a decimal number", s)
	}
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		e, err := strconv.Atoi(s[i+1:])
		if err != nil || e > maxExponent || e < -maxExponent {
			return Decimal{}, fmt.Errorf("%q: exponent out of range (at most %d)", s, maxExponent)
		}
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return Decimal{}, fmt.Errorf("%q is not a decimal number", s)
	}
	return Decimal{r}, nil
}

// jsonNumber reports whether s has JSON number syntax.
func jsonNumber(s string) bool {
	i := 0
	if i < len(s) && s[i] == '-' {
		i++
	}
	digits := func() int {
		n := 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
			n++
		}
		return n
	}
	start := i
	if digits() == 0 || (s[start] == '0' && i-start > 1) {
		return false
	}
	if i < len(s) && s[i] == '.' {
		i++
		if digits() == 0 {
			return false
		}
	}
	if i < len(s) && (s[i] == 'e' || s[i] == 'E') {
		i++
		if i < len(s) && (s[i] == '+' || s[i] == '-') {
			i++
		}
		if digits() == 0 {
			return false
		}
	}
	return i == len(s)
}

// String is the exact value, as a plain decimal when it has one ("1200.1").
func (d Decimal) String() string {
	if d.r == nil {
		return "0"
	}
	if d.r.IsInt() {
		return d.r.Num().String()
	}
	// A decimal fraction has a denominator 2^a 5^b: max(a,b) digits suffice.
	den := new(big.Int).Set(d.r.Denom())
	n := 0
	for _, p := range []int64{2, 5} {
		k := 0
		q, m := new(big.Int), new(big.Int)
		for {
			q.QuoRem(den, big.NewInt(p), m)
			if m.Sign() != 0 {
				break
			}
			den.Set(q)
			k++
		}
		n = max(n, k)
	}
	if den.Cmp(big.NewInt(1)) != 0 {
		return d.r.RatString() // not a decimal fraction (a quotient): exact anyway
	}
	return d.r.FloatString(n)
}

// Rat returns the value.
func (d Decimal) Rat() *big.Rat { return new(big.Rat).Set(d.rat()) }

func (d Decimal) rat() *big.Rat {
	if d.r == nil {
		return new(big.Rat)
	}
	return d.r
}

// ConvertToNative gives the decimal's string (for string targets) or *big.Rat.
func (d Decimal) ConvertToNative(t reflect.Type) (any, error) {
	switch t.Kind() {
	case reflect.String:
		return d.String(), nil
	}
	if t == reflect.TypeOf(&big.Rat{}) {
		return d.Rat(), nil
	}
	return nil, fmt.Errorf("policy: a decimal converts to a string, not %v", t)
}

// ConvertToType converts to string, or to the decimal type itself.
func (d Decimal) ConvertToType(t ref.Type) ref.Val {
	switch t.TypeName() {
	case types.StringType.TypeName():
		return types.String(d.String())
	case decimalName:
		return d
	case types.TypeType.TypeName():
		return decimalRuntime
	}
	return types.NewErr("policy: no conversion from decimal to %s", t.TypeName())
}

// Equal is exact equality with a decimal, an int or a double.
func (d Decimal) Equal(o ref.Val) ref.Val {
	r, ok := toRat(o)
	if !ok {
		return types.False
	}
	return types.Bool(d.rat().Cmp(r) == 0)
}

// Type is the decimal type.
func (d Decimal) Type() ref.Type { return decimalRuntime }

// Value is the *big.Rat.
func (d Decimal) Value() any { return d.rat() }

// Compare compares exactly with a decimal, an int, a uint or a double.
func (d Decimal) Compare(o ref.Val) ref.Val {
	r, ok := toRat(o)
	if !ok {
		return types.NewErr("policy: cannot compare a decimal with %s", o.Type().TypeName())
	}
	return types.Int(d.rat().Cmp(r))
}

// Add adds exactly a decimal or an int.
func (d Decimal) Add(o ref.Val) ref.Val {
	r, ok := toRat(o)
	if !ok {
		return types.NewErr("policy: cannot add %s to a decimal", o.Type().TypeName())
	}
	return Decimal{new(big.Rat).Add(d.rat(), r)}
}

// toRat is v as an exact rational: a decimal, an int, a uint, or a double
// read as the shortest decimal that reads back as it.
func toRat(v ref.Val) (*big.Rat, bool) {
	switch x := v.(type) {
	case Decimal:
		return x.rat(), true
	case types.Int:
		return new(big.Rat).SetInt64(int64(x)), true
	case types.Uint:
		return new(big.Rat).SetUint64(uint64(x)), true
	case types.Double:
		f := float64(x)
		if f != f || f > 1e300 || f < -1e300 {
			return nil, false
		}
		r, ok := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
		return r, ok
	}
	return nil, false
}

// toDecimal is decimal(x).
func toDecimal(v ref.Val) ref.Val {
	switch x := v.(type) {
	case types.String:
		d, err := ParseDecimal(strings.TrimSpace(string(x)))
		if err != nil {
			return types.NewErr("policy: decimal(): %v", err)
		}
		return d
	}
	r, ok := toRat(v)
	if !ok {
		return types.NewErr("policy: decimal() takes a string, an int, a double or a decimal, not %s", v.Type().TypeName())
	}
	return Decimal{r}
}

// numberValue is a JSON number's CEL value: an int when it is an integer
// that fits int64, else a Decimal (an error value when it cannot be parsed:
// any use of it fails, and the rule denies).
func numberValue(s string) ref.Val {
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return types.Int(i)
	}
	d, err := ParseDecimal(s)
	if err != nil {
		return types.NewErr("policy: argument number %v", err)
	}
	if d.r.IsInt() && d.r.Num().IsInt64() {
		return types.Int(d.r.Num().Int64()) // 1.0, 1e2: integers written otherwise
	}
	return d
}
