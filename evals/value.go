package evals

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"strconv"
	"strings"
)

// kind is the type of a decoded JSON value, in the terms Python's json module
// gives it: numbers written with a fraction or an exponent are floats, the
// others ints. The leaderboard's checker depends on that distinction.
type kind uint8

const (
	kNull kind = iota
	kBool
	kInt
	kFloat
	kString
	kList
	kObject
)

func (k kind) String() string {
	switch k {
	case kNull:
		return "null"
	case kBool:
		return "boolean"
	case kInt:
		return "integer"
	case kFloat:
		return "float"
	case kString:
		return "string"
	case kList:
		return "array"
	case kObject:
		return "object"
	}
	return "unknown"
}

// value is one decoded JSON value that keeps object key order and the
// int/float distinction. Integers that do not fit in int64 keep their digits
// in big.
type value struct {
	k    kind
	b    bool
	i    int64
	big  *big.Int
	f    float64
	s    string
	list []value
	keys []string
	vals []value
}

// get returns the member named key of an object.
func (v value) get(key string) (value, bool) {
	for i, k := range v.keys {
		if k == key {
			return v.vals[i], true
		}
	}
	return value{}, false
}

// maxValueDepth bounds nesting while decoding untrusted plans and datasets.
const maxValueDepth = 64

// parseValue decodes exactly one JSON value.
func parseValue(data []byte) (value, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return value{}, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return value{}, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

func decodeValue(dec *json.Decoder, depth int) (value, error) {
	if depth > maxValueDepth {
		return value{}, fmt.Errorf("nesting deeper than %d", maxValueDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		if errors.Is(err, io.EOF) {
			return value{}, io.ErrUnexpectedEOF
		}
		return value{}, err
	}
	switch t := tok.(type) {
	case nil:
		return value{k: kNull}, nil
	case bool:
		return value{k: kBool, b: t}, nil
	case string:
		return value{k: kString, s: t}, nil
	case json.Number:
		return numberValue(string(t))
	case json.Delim:
		switch t {
		case '[':
			var list []value
			for dec.More() {
				e, err := decodeValue(dec, depth+1)
				if err != nil {
					return value{}, err
				}
				list = append(list, e)
			}
			if _, err := dec.Token(); err != nil {
				return value{}, err
			}
			return value{k: kList, list: list}, nil
		case '{':
			v := value{k: kObject}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return value{}, err
				}
				key, ok := kt.(string)
				if !ok {
					return value{}, fmt.Errorf("object key %v is not a string", kt)
				}
				for _, k := range v.keys {
					if k == key {
						return value{}, fmt.Errorf("duplicate object key %q", key)
					}
				}
				e, err := decodeValue(dec, depth+1)
				if err != nil {
					return value{}, err
				}
				v.keys = append(v.keys, key)
				v.vals = append(v.vals, e)
			}
			if _, err := dec.Token(); err != nil {
				return value{}, err
			}
			return v, nil
		}
	}
	return value{}, fmt.Errorf("unexpected token %v", tok)
}

func numberValue(text string) (value, error) {
	if strings.ContainsAny(text, ".eE") {
		f, err := strconv.ParseFloat(text, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return value{}, fmt.Errorf("number %s: %w", text, err)
		}
		return value{k: kFloat, f: f, s: text}, nil
	}
	i, err := strconv.ParseInt(text, 10, 64)
	if err == nil {
		return value{k: kInt, i: i, s: text}, nil
	}
	b, ok := new(big.Int).SetString(text, 10)
	if !ok {
		return value{}, fmt.Errorf("number %s is not an integer", text)
	}
	return value{k: kInt, big: b, s: text}, nil
}

// isNumber reports whether v takes part in numeric comparison (Python's bool
// is an int subclass: True == 1).
func (v value) isNumber() bool { return v.k == kBool || v.k == kInt || v.k == kFloat }

// rat returns v as an exact rational number; ok is false for NaN/Inf.
func (v value) rat() (*big.Rat, bool) {
	switch v.k {
	case kBool:
		if v.b {
			return big.NewRat(1, 1), true
		}
		return new(big.Rat), true
	case kInt:
		if v.big != nil {
			return new(big.Rat).SetInt(v.big), true
		}
		return new(big.Rat).SetInt64(v.i), true
	case kFloat:
		if math.IsInf(v.f, 0) || math.IsNaN(v.f) {
			return nil, false
		}
		return new(big.Rat).SetFloat64(v.f), true
	}
	return nil, false
}

// float returns v as a float64 (numbers only).
func (v value) float() float64 {
	switch v.k {
	case kBool:
		if v.b {
			return 1
		}
		return 0
	case kInt:
		if v.big != nil {
			f, _ := new(big.Float).SetInt(v.big).Float64()
			return f
		}
		return float64(v.i)
	}
	return v.f
}

// numEqual compares two numbers exactly, as Python does across int, float and bool.
func numEqual(a, b value) bool {
	if a.k != kFloat && b.k != kFloat && a.big == nil && b.big == nil {
		return a.intOrBool() == b.intOrBool()
	}
	if a.k == kFloat && b.k == kFloat {
		return a.f == b.f
	}
	ra, ok1 := a.rat()
	rb, ok2 := b.rat()
	return ok1 && ok2 && ra.Cmp(rb) == 0
}

func (v value) intOrBool() int64 {
	if v.k == kBool {
		if v.b {
			return 1
		}
		return 0
	}
	return v.i
}

// pyEqual is Python's == over decoded JSON values: numbers compare by value
// whatever their type, lists element by element, objects by key set and
// values, strings exactly.
func pyEqual(a, b value) bool {
	if a.isNumber() && b.isNumber() {
		return numEqual(a, b)
	}
	if a.k != b.k {
		return false
	}
	switch a.k {
	case kNull:
		return true
	case kString:
		return a.s == b.s
	case kList:
		if len(a.list) != len(b.list) {
			return false
		}
		for i := range a.list {
			if !pyEqual(a.list[i], b.list[i]) {
				return false
			}
		}
		return true
	case kObject:
		if len(a.keys) != len(b.keys) {
			return false
		}
		for i, k := range a.keys {
			bv, ok := b.get(k)
			if !ok || !pyEqual(a.vals[i], bv) {
				return false
			}
		}
		return true
	}
	return false
}

// pyIn is Python's "x in list".
func pyIn(x value, list []value) bool {
	for _, e := range list {
		if pyEqual(x, e) {
			return true
		}
	}
	return false
}

// String renders v as compact JSON (numbers as written).
func (v value) String() string {
	var b strings.Builder
	v.write(&b)
	return b.String()
}

func (v value) write(b *strings.Builder) {
	switch v.k {
	case kNull:
		b.WriteString("null")
	case kBool:
		b.WriteString(strconv.FormatBool(v.b))
	case kInt, kFloat:
		if v.s != "" {
			b.WriteString(v.s)
		} else if v.k == kInt {
			b.WriteString(strconv.FormatInt(v.i, 10))
		} else {
			b.WriteString(strconv.FormatFloat(v.f, 'g', -1, 64))
		}
	case kString:
		q, _ := json.Marshal(v.s)
		b.Write(q)
	case kList:
		b.WriteByte('[')
		for i, e := range v.list {
			if i > 0 {
				b.WriteString(", ")
			}
			e.write(b)
		}
		b.WriteByte(']')
	case kObject:
		b.WriteByte('{')
		for i, k := range v.keys {
			if i > 0 {
				b.WriteString(", ")
			}
			q, _ := json.Marshal(k)
			b.Write(q)
			b.WriteString(": ")
			v.vals[i].write(b)
		}
		b.WriteByte('}')
	}
}

// showList renders acceptable values for a message: ["a", "b"].
func showList(vs []value) string {
	return value{k: kList, list: vs}.String()
}
