package chattemplate

import (
	"errors"
	"math"
	"math/big"
)

// Integers are unbounded, as in Python: an int is an int64 while it fits, else a *big.Int (never
// one that would fit an int64, so that each integer has one form). Arithmetic on int64s checks for
// overflow and goes on in math/big when it overflows.

// maxIntBits bounds the integers a render computes: Python refuses to print an int of more than
// 4300 digits (about 14,300 bits), and a larger one is a faulty template's runaway.
const maxIntBits = 14300

var errIntTooLarge = errors.New("integer too large (more than 4300 digits)")

// normInt returns b as an int64 when it fits, else b.
func normInt(b *big.Int) (value, error) {
	if b.IsInt64() {
		return b.Int64(), nil
	}
	if b.BitLen() > maxIntBits {
		return nil, errIntTooLarge
	}
	return b, nil
}

// isInt reports whether v is an integer (bool excluded).
func isInt(v value) bool {
	switch v.(type) {
	case int64, *big.Int:
		return true
	}
	return false
}

// toBig returns an integer (int64, *big.Int or bool) as a new *big.Int.
func toBig(v value) *big.Int {
	switch x := v.(type) {
	case int64:
		return big.NewInt(x)
	case *big.Int:
		return new(big.Int).Set(x)
	case bool:
		return big.NewInt(boolInt(x))
	}
	return nil
}

// bigToFloat is Python's float(int): the nearest float, or an error past the float range.
func bigToFloat(b *big.Int) (float64, error) {
	f, _ := new(big.Float).SetInt(b).Float64()
	if math.IsInf(f, 0) {
		return 0, errors.New("int too large to convert to float")
	}
	return f, nil
}

// intArith applies + - * // % ** to two integers (int64 or *big.Int) exactly.
func intArith(op string, l, r value) (value, error) {
	a, aSmall := l.(int64)
	b, bSmall := r.(int64)
	if aSmall && bSmall {
		switch op {
		case "+":
			if sum := a + b; (sum > a) == (b > 0) {
				return sum, nil
			}
		case "-":
			if d := a - b; (d < a) == (b > 0) {
				return d, nil
			}
		case "*":
			if a == 0 || b == 0 {
				return int64(0), nil
			}
			if p := a * b; p/b == a && !(a == -1 && b == math.MinInt64) && !(b == -1 && a == math.MinInt64) {
				return p, nil
			}
		case "//":
			if b == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			if a != math.MinInt64 || b != -1 {
				q := a / b
				if a%b != 0 && (a < 0) != (b < 0) {
					q--
				}
				return q, nil
			}
		case "%":
			if b == 0 {
				return nil, errors.New("integer division or modulo by zero")
			}
			m := a % b
			if m != 0 && (m < 0) != (b < 0) {
				m += b
			}
			return m, nil
		case "**":
			if p, ok := powInt64(a, b); ok {
				return p, nil
			}
		}
	}
	x, y := toBig(l), toBig(r)
	switch op {
	case "+":
		return normInt(x.Add(x, y))
	case "-":
		return normInt(x.Sub(x, y))
	case "*":
		if x.BitLen()+y.BitLen() > maxIntBits+1 {
			return nil, errIntTooLarge
		}
		return normInt(x.Mul(x, y))
	case "//", "%":
		if y.Sign() == 0 {
			return nil, errors.New("integer division or modulo by zero")
		}
		q, m := new(big.Int).QuoRem(x, y, new(big.Int))
		if m.Sign() != 0 && m.Sign() != y.Sign() { // floor, as Python rounds
			q.Sub(q, big.NewInt(1))
			m.Add(m, y)
		}
		if op == "//" {
			return normInt(q)
		}
		return normInt(m)
	case "**":
		if y.Sign() < 0 {
			return nil, nil // the caller computes a float
		}
		switch {
		case x.CmpAbs(big.NewInt(1)) <= 0: // 0, 1 and -1 stay small whatever the exponent
			if x.Sign() < 0 && y.Bit(0) == 0 {
				return int64(1), nil
			}
			return normInt(x)
		case !y.IsInt64() || int64(x.BitLen()-1)*y.Int64() > maxIntBits:
			return nil, errIntTooLarge
		}
		return normInt(x.Exp(x, y, nil))
	}
	return nil, errors.New("unknown operator " + op)
}

// powInt64 is a**b for b >= 0 when it fits an int64.
func powInt64(a, b int64) (int64, bool) {
	switch {
	case b < 0:
		return 0, false
	case b == 0:
		return 1, true
	case a == 0 || a == 1:
		return a, true
	case a == -1:
		return 1 - 2*(b%2), true
	}
	out := int64(1)
	for ; b > 0; b-- { // |a| >= 2 overflows within 63 steps
		if out > math.MaxInt64/abs64(a) || out < -math.MaxInt64/abs64(a) {
			return 0, false
		}
		out *= a
	}
	return out, true
}

func abs64(a int64) int64 {
	if a < 0 {
		return -a
	}
	return a
}

// cmpNumbers orders two numbers (int64, *big.Int, float64 or bool) exactly; ok is false when either
// is not a number or is NaN.
func cmpNumbers(a, b value) (c int, ok bool) {
	toExact := func(v value) (*big.Float, bool) {
		switch x := v.(type) {
		case bool:
			return new(big.Float).SetInt64(boolInt(x)), true
		case int64:
			return new(big.Float).SetInt64(x), true
		case *big.Int:
			return new(big.Float).SetInt(x), true
		case float64:
			if math.IsNaN(x) {
				return nil, false
			}
			return new(big.Float).SetFloat64(x), true
		}
		return nil, false
	}
	x, ok1 := toExact(a)
	y, ok2 := toExact(b)
	if !ok1 || !ok2 {
		return 0, false
	}
	return x.Cmp(y), true
}
