package ff1

import (
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

const alphabet36 = "0123456789abcdefghijklmnopqrstuvwxyz"

func digits(t *testing.T, s string, radix int) []uint16 {
	t.Helper()
	out := make([]uint16, len(s))
	for i := range len(s) {
		d := strings.IndexByte(alphabet36[:radix], s[i])
		if d < 0 {
			t.Fatalf("numeral %q not in radix %d", s[i], radix)
		}
		out[i] = uint16(d)
	}
	return out
}

func text(ds []uint16) string {
	var b strings.Builder
	for _, d := range ds {
		b.WriteByte(alphabet36[d])
	}
	return b.String()
}

func unhex(t *testing.T, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The nine samples of NIST's "FF1samples" (SP 800-38G examples, csrc.nist.gov): every sample
// the document publishes, AES-128/192/256 × (radix 10 without tweak, radix 10 with tweak,
// radix 36 with tweak).
var nistSamples = []struct {
	name, key, tweak string
	radix            int
	pt, ct           string
}{
	{"sample 1", "2B7E151628AED2A6ABF7158809CF4F3C", "", 10, "0123456789", "2433477484"},
	{"sample 2", "2B7E151628AED2A6ABF7158809CF4F3C", "39383736353433323130", 10, "0123456789", "6124200773"},
	{"sample 3", "2B7E151628AED2A6ABF7158809CF4F3C", "3737373770717273373737", 36, "0123456789abcdefghi", "a9tv40mll9kdu509eum"},
	{"sample 4", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F", "", 10, "0123456789", "2830668132"},
	{"sample 5", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F", "39383736353433323130", 10, "0123456789", "2496655549"},
	{"sample 6", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F", "3737373770717273373737", 36, "0123456789abcdefghi", "xbj3kv35jrawxv32ysr"},
	{"sample 7", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F7F036D6F04FC6A94", "", 10, "0123456789", "6657667009"},
	{"sample 8", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F7F036D6F04FC6A94", "39383736353433323130", 10, "0123456789", "1001623463"},
	{"sample 9", "2B7E151628AED2A6ABF7158809CF4F3CEF4359D8D580AA4F7F036D6F04FC6A94", "3737373770717273373737", 36, "0123456789abcdefghi", "xs8a0azh2avyalyzuwd"},
}

func TestNISTSamples(t *testing.T) {
	for _, tc := range nistSamples {
		t.Run(tc.name, func(t *testing.T) {
			c, err := New(unhex(t, tc.key), tc.radix)
			if err != nil {
				t.Fatal(err)
			}
			tw := unhex(t, tc.tweak)
			ct, err := c.EncryptDigits(tw, digits(t, tc.pt, tc.radix))
			if err != nil {
				t.Fatal(err)
			}
			if got := text(ct); got != tc.ct {
				t.Fatalf("encrypt: got %s, want %s", got, tc.ct)
			}
			pt, err := c.DecryptDigits(tw, digits(t, tc.ct, tc.radix))
			if err != nil {
				t.Fatal(err)
			}
			if got := text(pt); got != tc.pt {
				t.Fatalf("decrypt: got %s, want %s", got, tc.pt)
			}
			// The integer form agrees with the numeral form where the domain fits 64 bits.
			if tc.radix == 10 {
				x := uint64(123456789) // "0123456789"
				y, err := c.Encrypt(tw, 10, x)
				if err != nil {
					t.Fatal(err)
				}
				if got, want := y, mustUint(t, tc.ct); got != want {
					t.Fatalf("Encrypt: got %d, want %d", got, want)
				}
				if back, _ := c.Decrypt(tw, 10, y); back != x {
					t.Fatalf("Decrypt: got %d, want %d", back, x)
				}
			}
		})
	}
}

func mustUint(t *testing.T, s string) uint64 {
	t.Helper()
	var v uint64
	for i := range len(s) {
		v = v*10 + uint64(s[i]-'0')
	}
	return v
}

// Every value of a whole domain maps to a distinct value, and back (a bijection), for the
// smallest domain the standard allows and for a 36-radix one.
func TestBijectionWholeDomain(t *testing.T) {
	c, err := New(unhex(t, "2B7E151628AED2A6ABF7158809CF4F3C"), 10)
	if err != nil {
		t.Fatal(err)
	}
	const n = 6
	dom, err := c.Domain(n)
	if err != nil {
		t.Fatal(err)
	}
	seen := make([]bool, dom)
	tw := []byte("order")
	lim := dom
	if raceOn {
		lim = dom / 10 // the race detector makes the whole domain take 15 s; distinctness still shows
	}
	for x := range lim {
		y, err := c.Encrypt(tw, n, x)
		if err != nil {
			t.Fatal(err)
		}
		if y >= dom || seen[y] {
			t.Fatalf("Encrypt(%d) = %d: outside the domain or seen before", x, y)
		}
		seen[y] = true
		if x%997 == 0 {
			if back, _ := c.Decrypt(tw, n, y); back != x {
				t.Fatalf("Decrypt(Encrypt(%d)) = %d", x, back)
			}
		}
	}
}

func TestRoundTripRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, radix := range []int{10, 36, 62} {
		for _, keyLen := range []int{16, 24, 32} {
			key := make([]byte, keyLen)
			for i := range key {
				key[i] = byte(r.IntN(256))
			}
			c, err := New(key, radix)
			if err != nil {
				t.Fatal(err)
			}
			for n := 4; ; n++ {
				dom, err := c.Domain(n)
				if errors.Is(err, ErrDomain) {
					continue
				}
				if err != nil {
					break
				}
				for range 200 {
					tw := make([]byte, r.IntN(40))
					for i := range tw {
						tw[i] = byte(r.IntN(256))
					}
					x := r.Uint64N(dom)
					y, err := c.Encrypt(tw, n, x)
					if err != nil {
						t.Fatal(err)
					}
					if y >= dom {
						t.Fatalf("radix %d n %d: %d outside the domain %d", radix, n, y, dom)
					}
					back, err := c.Decrypt(tw, n, y)
					if err != nil || back != x {
						t.Fatalf("radix %d n %d tweak %x: Decrypt(Encrypt(%d)) = %d, %v", radix, n, tw, x, back, err)
					}
				}
			}
		}
	}
}

func TestRefusals(t *testing.T) {
	key := unhex(t, "2B7E151628AED2A6ABF7158809CF4F3C")
	if _, err := New(key[:15], 10); !errors.Is(err, ErrKey) {
		t.Fatalf("15-byte key: got %v, want ErrKey", err)
	}
	if _, err := New(key, 1); !errors.Is(err, ErrRadix) {
		t.Fatalf("radix 1: got %v, want ErrRadix", err)
	}
	c, _ := New(key, 10)
	if _, err := c.Encrypt(nil, 5, 1); !errors.Is(err, ErrDomain) {
		t.Fatalf("10^5 domain: got %v, want ErrDomain", err)
	}
	if _, err := c.Encrypt(nil, 20, 1); !errors.Is(err, ErrLength) {
		t.Fatalf("10^20 domain: got %v, want ErrLength", err)
	}
	if _, err := c.Encrypt(nil, 6, 1000000); !errors.Is(err, ErrInput) {
		t.Fatalf("x = 10^6 in a 10^6 domain: got %v, want ErrInput", err)
	}
	if _, err := c.EncryptDigits(nil, []uint16{1, 2, 3, 4, 5, 6, 7, 10}); !errors.Is(err, ErrInput) {
		t.Fatalf("numeral 10 in radix 10: got %v, want ErrInput", err)
	}
}

func TestEncryptAllocatesNothing(t *testing.T) {
	c, _ := New(unhex(t, "2B7E151628AED2A6ABF7158809CF4F3C"), 10)
	tw := []byte("order")
	c.Encrypt(tw, 12, 1) // warm the pool
	if a := testing.AllocsPerRun(1000, func() { c.Encrypt(tw, 12, 42) }); a != 0 {
		t.Fatalf("Encrypt allocates %.1f times per call, want 0", a)
	}
}

func BenchmarkEncrypt12Digits(b *testing.B) {
	c, _ := New(make([]byte, 32), 10)
	tw := []byte("order")
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		var x uint64
		for pb.Next() {
			x++
			if _, err := c.Encrypt(tw, 12, x); err != nil {
				b.Fatal(err)
			}
		}
	})
}
