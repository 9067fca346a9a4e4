package handlers

// cmdIndex finds a command by its name, case-insensitively, without hashing the name or
// allocating: a request's name picks one of a few small buckets by its length and first
// letter, and the bucket's commands are compared with asciiEqualFold. The table's 60-odd
// names spread over the buckets with at most a few in each, so a look-up is a couple of
// compares of a few bytes: cheaper than lower-casing the name and a map look-up, which is
// most of what a plain INCR costs the handler besides its ID.
type cmdIndex struct {
	buckets [cmdBuckets][]*command
}

const cmdBuckets = 128 // a power of two

func cmdBucket(name []byte) int {
	if len(name) == 0 {
		return 0
	}
	return (len(name)*37 + int(name[0]|0x20)) & (cmdBuckets - 1)
}

// add indexes cmd; its name is lower case.
func (x *cmdIndex) add(cmd *command) {
	b := cmdBucket([]byte(cmd.name))
	x.buckets[b] = append(x.buckets[b], cmd)
}

// find returns the command named name in any case, nil if there is none.
func (x *cmdIndex) find(name []byte) *command {
	for _, cmd := range x.buckets[cmdBucket(name)] {
		if asciiEqualFold(name, cmd.name) {
			return cmd
		}
	}
	return nil
}
