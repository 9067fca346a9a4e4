package handlers

import (
	"sort"
	"strings"

	"github.com/leafd/leafd/resp"
)

// Client-side caching handshakes. rueidis (and valkey-go) send CLIENT TRACKING ON OPTIN on
// connect and give up when it fails; node-redis does with clientSideCache. leafd has no
// readable keys — every reply is a fresh ID — so nothing a client caches can ever be
// invalidated, and no invalidation message is ever sent. Tracking is therefore accepted and
// remembered with Redis's option checks and error wording (TRACKINGINFO, GETREDIR and
// CACHING report and validate it), but it changes nothing else. NO-EVICT and NO-TOUCH are
// accepted for the same reason: leafd evicts no clients for memory and has no keys to touch.

// tracking is a connection's CLIENT TRACKING state, as Redis keeps it.
type tracking struct {
	on       bool
	redirect int64
	bcast    bool
	optin    bool
	optout   bool
	noloop   bool
	caching  bool     // CLIENT CACHING yes (OPTIN) or no (OPTOUT) for the next command
	prefixes []string // BCAST prefixes, sorted
	noEvict  bool
	noTouch  bool
}

// clientTracking: CLIENT TRACKING ON|OFF [REDIRECT id] [PREFIX p ...] [BCAST] [OPTIN]
// [OPTOUT] [NOLOOP]. The checks and their order are Redis's.
func (h *Handler) clientTracking(c *resp.Conn, args [][]byte) error {
	var (
		redirect                     int64
		bcast, optin, optout, noloop bool
		prefixes                     []string
	)
	for j := 3; j < len(args); j++ {
		more := len(args) - 1 - j
		switch opt := strings.ToLower(string(args[j])); {
		case opt == "redirect" && more > 0:
			j++
			if redirect != 0 {
				return replyError("ERR A client can only redirect to a single other client")
			}
			id, err := parseInt(args[j])
			if err != nil {
				return err
			}
			if h.srv == nil || !h.srv.HasClient(id) {
				return replyError("ERR The client ID you want redirect to does not exist")
			}
			redirect = id
		case opt == "bcast":
			bcast = true
		case opt == "optin":
			optin = true
		case opt == "optout":
			optout = true
		case opt == "noloop":
			noloop = true
		case opt == "prefix" && more > 0:
			j++
			prefixes = append(prefixes, string(args[j]))
		default:
			return errSyntax
		}
	}
	switch strings.ToLower(string(args[2])) {
	case "on":
		st := state(c, true)
		t := &st.track
		if !bcast && len(prefixes) > 0 {
			return replyError("ERR PREFIX option requires BCAST mode to be enabled")
		}
		if t.on && t.bcast != bcast {
			return replyError("ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling it with a different mode.")
		}
		if bcast && (optin || optout) {
			return replyError("ERR OPTIN and OPTOUT are not compatible with BCAST")
		}
		if optin && optout {
			return replyError("ERR You can't specify both OPTIN mode and OPTOUT mode")
		}
		if optin && t.optout || optout && t.optin {
			return replyError("ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling it with a different mode.")
		}
		if bcast {
			if err := prefixCollision(t.prefixes, prefixes); err != nil {
				return err
			}
		}
		t.on, t.redirect = true, redirect
		t.bcast, t.optin, t.optout, t.noloop = bcast, optin, optout, noloop
		if bcast {
			if len(prefixes) == 0 {
				prefixes = []string{""}
			}
			for _, p := range prefixes {
				if i := sort.SearchStrings(t.prefixes, p); i == len(t.prefixes) || t.prefixes[i] != p {
					t.prefixes = append(t.prefixes, p)
					sort.Strings(t.prefixes)
				}
			}
		}
	case "off":
		if st := state(c, false); st != nil {
			st.track = tracking{noEvict: st.track.noEvict, noTouch: st.track.noTouch}
		}
	default:
		return errSyntax
	}
	c.WriteSimple("OK")
	return nil
}

// prefixCollision is Redis's check that no two BCAST prefixes of a client overlap (one a
// prefix of the other), with its wording.
func prefixCollision(have, add []string) error {
	overlap := func(a, b string) bool { return strings.HasPrefix(a, b) || strings.HasPrefix(b, a) }
	for i, p := range add {
		for _, q := range have {
			if overlap(p, q) {
				return replyError("ERR Prefix '" + p + "' overlaps with an existing prefix '" + q + "'. Prefixes for a single client must not overlap.")
			}
		}
		for _, q := range add[i+1:] {
			if overlap(p, q) {
				return replyError("ERR Prefix '" + p + "' overlaps with another provided prefix '" + q + "'. Prefixes for a single client must not overlap.")
			}
		}
	}
	return nil
}

// clientCaching: CLIENT CACHING YES|NO.
func clientCaching(c *resp.Conn, arg []byte) error {
	st := state(c, false)
	if st == nil || !st.track.on {
		return replyError("ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled")
	}
	switch strings.ToLower(string(arg)) {
	case "yes":
		if !st.track.optin {
			return replyError("ERR CLIENT CACHING YES is only valid when tracking is enabled in OPTIN mode.")
		}
	case "no":
		if !st.track.optout {
			return replyError("ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.")
		}
	default:
		return errSyntax
	}
	st.track.caching = true
	c.WriteSimple("OK")
	return nil
}

// clientRedirect is CLIENT GETREDIR: -1 when tracking is off, else the redirect (0: none).
func clientRedirect(c *resp.Conn) int64 {
	st := state(c, false)
	if st == nil || !st.track.on {
		return -1
	}
	return st.track.redirect
}

// clientTrackingInfo: CLIENT TRACKINGINFO, Redis's map of flags, redirect and prefixes.
func clientTrackingInfo(c *resp.Conn) {
	var t tracking
	if st := state(c, false); st != nil {
		t = st.track
	}
	flags := []string{"off"}
	if t.on {
		flags[0] = "on"
	}
	if t.bcast {
		flags = append(flags, "bcast")
	}
	if t.optin {
		flags = append(flags, "optin")
		if t.caching {
			flags = append(flags, "caching-yes")
		}
	}
	if t.optout {
		flags = append(flags, "optout")
		if t.caching {
			flags = append(flags, "caching-no")
		}
	}
	if t.noloop {
		flags = append(flags, "noloop")
	}
	c.WriteMap(3)
	c.WriteBulkString("flags")
	c.WriteSet(len(flags))
	for _, f := range flags {
		c.WriteBulkString(f)
	}
	c.WriteBulkString("redirect")
	c.WriteInt(clientRedirect(c))
	c.WriteBulkString("prefixes")
	c.WriteArray(len(t.prefixes))
	for _, p := range t.prefixes {
		c.WriteBulkString(p)
	}
}

// clientOnOff sets a boolean client flag from ON|OFF (NO-EVICT, NO-TOUCH).
func clientOnOff(arg []byte, flag *bool) error {
	switch strings.ToLower(string(arg)) {
	case "on":
		*flag = true
	case "off":
		*flag = false
	default:
		return errSyntax
	}
	return nil
}
