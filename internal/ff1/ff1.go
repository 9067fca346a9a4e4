// Package ff1 implements the FF1 format-preserving encryption mode of NIST SP 800-38G
// (Rev. 1) on AES from crypto/aes, for numeral strings whose halves fit in 64 bits: radix in
// [2, 65536] and, for a string of n numerals, radix^ceil(n/2) < 2^64 (for radix 10: n ≤ 38
// numerals through EncryptDigits, n ≤ 19 through Encrypt, whose input is one uint64).
//
// leafd uses it for opaque IDs: a counter in [1, D) goes through a keyed bijection of the
// domain, so distinct counters give distinct IDs and the key reverses it. The construction is
// the standard's, step for step (Algorithms 7 and 8); the tests check it against every sample
// of NIST's "FF1samples" document. The standard requires radix^n ≥ 1,000,000 (the domain size
// floor of Rev. 1); New refuses nothing, Encrypt and the digit functions refuse smaller domains.
//
// A Cipher is safe for concurrent use; Encrypt and Decrypt allocate nothing.
package ff1

import (
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
	"sync"
)

// MinDomain is the smallest domain size (radix^n) SP 800-38G Rev. 1 allows.
const MinDomain = 1000000

// Errors returned by this package.
var (
	ErrKey    = errors.New("ff1: the key must be 16, 24 or 32 bytes (AES-128, -192, -256)")
	ErrRadix  = errors.New("ff1: radix must be between 2 and 65536")
	ErrLength = errors.New("ff1: numeral string length outside what this implementation supports")
	ErrDomain = errors.New("ff1: domain smaller than the standard's minimum of 1,000,000")
	ErrInput  = errors.New("ff1: input outside the domain")
	ErrTweak  = errors.New("ff1: tweak too long")
)

// MaxTweak is the longest tweak accepted, in bytes.
const MaxTweak = 256

// Cipher is FF1 under one AES key and one radix.
type Cipher struct {
	block cipher.Block
	radix uint64
	pool  sync.Pool // *scratch: cipher.Block's arguments escape, so buffers are pooled
}

type scratch struct {
	buf [16 + MaxTweak + 16 + 16]byte // P || Q
	r   [16]byte
	r0  [16]byte // CIPH(P)
}

// New returns FF1 under key (AES-128, -192 or -256 by its length) for numerals of radix.
func New(key []byte, radix int) (*Cipher, error) {
	switch len(key) {
	case 16, 24, 32:
	default:
		return nil, ErrKey
	}
	if radix < 2 || radix > 1<<16 {
		return nil, ErrRadix
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, fmt.Errorf("ff1: %w", err)
	}
	c := &Cipher{block: b, radix: uint64(radix)}
	c.pool.New = func() any { return new(scratch) }
	return c, nil
}

// Radix returns the cipher's radix.
func (c *Cipher) Radix() int { return int(c.radix) }

// pow returns radix^m, and false when it does not fit in a uint64.
func (c *Cipher) pow(m int) (uint64, bool) {
	p := uint64(1)
	for range m {
		hi, lo := bits.Mul64(p, c.radix)
		if hi != 0 {
			return 0, false
		}
		p = lo
	}
	return p, true
}

// Domain returns radix^n, the number of n-numeral strings, and an error when Encrypt cannot
// take n numerals (radix^n must fit in a uint64) or the domain is below MinDomain.
func (c *Cipher) Domain(n int) (uint64, error) {
	if n < 2 {
		return 0, ErrLength
	}
	d, ok := c.pow(n)
	if !ok {
		return 0, ErrLength
	}
	if d < MinDomain {
		return 0, ErrDomain
	}
	return d, nil
}

// params holds what depends on n only.
type params struct {
	n, u, v int
	pu, pv  uint64 // radix^u, radix^v
	b, d    int
}

func (c *Cipher) params(n int) (params, error) {
	if n < 2 || n > 1<<20 {
		return params{}, ErrLength
	}
	u := n / 2
	v := n - u
	pv, ok := c.pow(v)
	if !ok {
		return params{}, ErrLength
	}
	pu, _ := c.pow(u)
	// Domain floor: radix^n ≥ 10^6, with radix^n possibly beyond 64 bits.
	if hi, lo := bits.Mul64(pu, pv); hi == 0 && lo < MinDomain {
		return params{}, ErrDomain
	}
	// b = ceil(ceil(v·log2(radix)) / 8); ceil(v·log2(radix)) is the bit length of radix^v − 1.
	b := (bits.Len64(pv-1) + 7) / 8
	d := 4*((b+3)/4) + 4
	return params{n: n, u: u, v: v, pu: pu, pv: pv, b: b, d: d}, nil
}

// feistel runs the ten rounds on the halves a = NUM(A), b = NUM(B) (Algorithm 7 step 6, or
// Algorithm 8 step 6 when dec).
func (c *Cipher) feistel(p params, tweak []byte, a, b uint64, dec bool) (uint64, uint64, error) {
	t := len(tweak)
	if t > MaxTweak {
		return 0, 0, ErrTweak
	}
	s := c.pool.Get().(*scratch)
	defer c.pool.Put(s)

	// P = [1]^1 || [2]^1 || [1]^1 || [radix]^3 || [10]^1 || [u mod 256]^1 || [n]^4 || [t]^4
	P := s.buf[:16]
	P[0], P[1], P[2] = 1, 2, 1
	P[3], P[4], P[5] = byte(c.radix>>16), byte(c.radix>>8), byte(c.radix)
	P[6], P[7] = 10, byte(p.u)
	binary.BigEndian.PutUint32(P[8:12], uint32(p.n))
	binary.BigEndian.PutUint32(P[12:16], uint32(t))
	// Q = T || [0]^((−t−b−1) mod 16) || [i]^1 || [NUM_radix(B)]^b
	pad := ((-t-p.b-1)%16 + 16) % 16
	qlen := t + pad + 1 + p.b
	Q := s.buf[16 : 16+qlen]
	copy(Q, tweak)
	clear(Q[t : t+pad])
	// PRF(P || Q) is CBC-MAC: P is the same in every round, so its block is enciphered once.
	r0 := s.r0[:]
	c.block.Encrypt(r0, P)

	for k := range 10 {
		i := k
		if dec {
			i = 9 - k
		}
		// The half fed to the round function: B when encrypting, A when decrypting.
		x := b
		if dec {
			x = a
		}
		Q[t+pad] = byte(i)
		num := Q[t+pad+1:]
		var be [8]byte
		binary.BigEndian.PutUint64(be[:], x)
		clear(num)
		if p.b >= 8 {
			copy(num[p.b-8:], be[:])
		} else {
			copy(num, be[8-p.b:])
		}
		// R = PRF(P || Q): CBC-MAC with a zero IV.
		R := s.r[:]
		copy(R, r0)
		for off := 0; off < len(Q); off += 16 {
			subtle16(R, Q[off:off+16])
			c.block.Encrypt(R, R)
		}
		// S = the first d bytes of R || CIPH(R ⊕ [1]^16) || ...; d ≤ 16 whenever halves fit
		// in 64 bits (b ≤ 8 → d ≤ 12), so S is a prefix of R.
		y := numBytes(R[:p.d])
		m := p.pu
		if i%2 == 1 {
			m = p.pv
		}
		ym := remBytes(y, m)
		var cc uint64
		if !dec {
			cc = addMod(a%m, ym, m)
			a, b = b, cc
		} else {
			cc = subMod(b%m, ym, m)
			b, a = a, cc
		}
	}
	return a, b, nil
}

func subtle16(dst, src []byte) {
	for i := range 16 {
		dst[i] ^= src[i]
	}
}

// u96 is a number of up to 12 bytes.
type u96 struct{ hi, lo uint64 }

func numBytes(b []byte) u96 {
	var v u96
	for _, x := range b {
		v.hi = v.hi<<8 | v.lo>>56
		v.lo = v.lo<<8 | uint64(x)
	}
	return v
}

func remBytes(v u96, m uint64) uint64 { return bits.Rem64(v.hi%m, v.lo, m) }

func addMod(a, b, m uint64) uint64 {
	s, carry := bits.Add64(a, b, 0)
	if carry != 0 || s >= m {
		s -= m
	}
	return s
}

func subMod(a, b, m uint64) uint64 {
	if a >= b {
		return a - b
	}
	return m - (b - a)
}

// Encrypt enciphers x, read as the n-numeral string STR^n_radix(x), under tweak. x must be
// below radix^n, and radix^n must fit in a uint64 (see Domain).
func (c *Cipher) Encrypt(tweak []byte, n int, x uint64) (uint64, error) {
	return c.crypt(tweak, n, x, false)
}

// Decrypt is the inverse of Encrypt.
func (c *Cipher) Decrypt(tweak []byte, n int, x uint64) (uint64, error) {
	return c.crypt(tweak, n, x, true)
}

func (c *Cipher) crypt(tweak []byte, n int, x uint64, dec bool) (uint64, error) {
	dom, err := c.Domain(n)
	if err != nil {
		return 0, err
	}
	if x >= dom {
		return 0, ErrInput
	}
	p, err := c.params(n)
	if err != nil {
		return 0, err
	}
	a, b, err := c.feistel(p, tweak, x/p.pv, x%p.pv, dec)
	if err != nil {
		return 0, err
	}
	return a*p.pv + b, nil
}

// EncryptDigits enciphers the numeral string x (each numeral below the radix) under tweak,
// exactly as SP 800-38G Algorithm 7. The result is a new slice.
func (c *Cipher) EncryptDigits(tweak []byte, x []uint16) ([]uint16, error) {
	return c.cryptDigits(tweak, x, false)
}

// DecryptDigits is SP 800-38G Algorithm 8, the inverse of EncryptDigits.
func (c *Cipher) DecryptDigits(tweak []byte, x []uint16) ([]uint16, error) {
	return c.cryptDigits(tweak, x, true)
}

func (c *Cipher) cryptDigits(tweak []byte, x []uint16, dec bool) ([]uint16, error) {
	p, err := c.params(len(x))
	if err != nil {
		return nil, err
	}
	num := func(ds []uint16) (uint64, error) {
		var v uint64
		for _, d := range ds {
			if uint64(d) >= c.radix {
				return 0, ErrInput
			}
			v = v*c.radix + uint64(d)
		}
		return v, nil
	}
	a, err := num(x[:p.u])
	if err != nil {
		return nil, err
	}
	b, err := num(x[p.u:])
	if err != nil {
		return nil, err
	}
	if a, b, err = c.feistel(p, tweak, a, b, dec); err != nil {
		return nil, err
	}
	out := make([]uint16, p.n)
	str := func(dst []uint16, v uint64) {
		for i := len(dst) - 1; i >= 0; i-- {
			dst[i] = uint16(v % c.radix)
			v /= c.radix
		}
	}
	str(out[:p.u], a)
	str(out[p.u:], b)
	return out, nil
}
