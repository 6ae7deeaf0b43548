// Package snapshot is the on-disk and backup format of a rangealloc state
// machine snapshot. Raft snapshots (FSM.Persist and FSM.Restore) and backups
// taken over the API use the same bytes, so a backup restores into a fresh
// cluster.
//
// The package is a pure codec. There are two functions, Write and Read, and
// one plain type, State (with its Pools, Requests and Members), that the
// state machine fills before Write and consumes after Read. Both functions
// stream through a 64 KiB buffer: neither holds the whole encoding in
// memory, and Write allocates nothing per allocation record.
//
// # Layout (format version 4)
//
// Fixed-width integers are big-endian. uvarint is encoding/binary's unsigned
// varint in its shortest form. str is uvarint(len) followed by len bytes.
//
//	offset  size  field
//	     0     8  magic     89 52 41 53 0d 0a 1a 0a      "\x89RAS\r\n\x1a\n"
//	     8     4  version   uint32, 3 or 4 (Read also reads 1, which ends after
//	                        members, and 2, which ends after cluster)
//	    12     8  index     uint64, the last applied log index
//	    20     8  term      uint64, the term of that entry
//	    28     …  pools     'P' uvarint(n) pool×n       sorted by name, unique
//	           …  requests  'R' uvarint(n) request×n    oldest first, IDs unique
//	           …  members   'M' uvarint(n) member×n     sorted by ID, unique
//	           …  cluster   'C' clusterID:str flags:1  0..64 printable bytes; "" before one is drawn;
//	                                                   flags bit 0: restored from a backup
//	           …  services  'S' network uvarint(n) service×n freed:uvarint
//	                                                   sorted by key, unique; freed: the index of the
//	                                                   last entry that freed a Service's value
//	           …  feature   'F' level:uvarint          version 4 only: the cluster's feature level, >= 2
//	   L-4     4  checksum  uint32, CRC-32C of bytes [0, L-4)
//	     L        end of stream: nothing may follow
//
//	pool       = name:str range:str data:str uvarint(k) allocation×k
//	allocation = owner:str flags:1 revision:uvarint
//	request    = id:str index:uvarint fingerprint:8 result:str
//	member     = id:str raftAddr:str apiAddr:str [flags:1]  flags in version 4 only:
//	                                                  bit 0 keeps the member a non-voter
//	network    = 00 (none) | 01 uvarint(f) family:str×f ipv4Pool:str ipv6Pool:str nodePortPool:str
//	service    = key:str revision:uvarint spec:str   key "namespace/name", revision > 0,
//	                                                  spec in the state machine's encoding
//
// Write picks the version from the state's feature level: 3 for level 1
// (the format of the release before feature levels, so that its nodes
// read what a newer node writes during a rolling upgrade), 4 from level
// 2 on. A cluster raises its level only once every member reads 4.
//
// flags holds the mode in bit 0 (1 = static, 0 = dynamic); its other bits
// are zero. The one-byte section tags cost nothing and let an error say
// which section it found damaged.
//
// data is the bitmap exactly as Kubernetes stores it in a RangeAllocation:
// the big-endian, minimal-length bytes of the integer whose bit i is offset
// i (math/big.Int.Bytes()). Leading zero bytes are accepted and kept.
//
//	offsets {0, 9}    data = 02 01
//	                         byte 0      byte 1
//	                         0000 0010   0000 0001
//	                                ^            ^
//	                            offset 9     offset 0
//
// Offsets are not stored a second time: k must equal the number of set bits
// in data, and allocation j belongs to the j-th set bit counting up from
// offset 0 (the lowest bit of the last byte).
//
// # Checksum
//
// The trailer is CRC-32C (Castagnoli) over every byte before it. A snapshot
// guards against accidents (a torn write, a flipped bit on disk, a truncated
// copy of a backup), not against an adversary, for which a MAC or a
// signature would be needed. CRC-32C suits that job: hash/crc32 computes it
// with the CPU's CRC32 instructions (SSE 4.2, ARMv8) at several GB/s, so it
// costs nothing next to the disk; it detects every error burst of up to 32
// bits, so every damaged single byte; and it is the checksum of iSCSI,
// ext4's metadata, Btrfs, LevelDB and etcd's WAL. A full /12 pool with a
// million owned allocations encodes to about 21 MB.
//
// The magic follows PNG's: the 0x89 byte catches a 7-bit transfer and keeps
// tools from taking the file for text, CR LF and LF catch line-ending
// conversion, and 0x1a stops a DOS "type".
//
// # Limits and checks
//
// Read validates everything before it returns, so that a caller can swap
// the result in or leave its running state untouched:
//
//	field              bytes      other checks
//	pool name          1..63      a lowercase DNS label; names strictly increase
//	range              1..64      printable ASCII (not parsed here)
//	data               0..131073  2^20 bits plus one leading zero byte
//	allocations                   exactly one per set bit of data
//	owner              0..253
//	flags                         0 or 1
//	revision                      > 0
//	request ID         1..128     unique
//	request result     0..1 MiB
//	member ID          1..128     IDs strictly increase
//	member address     0..256
//
// No length read from the stream decides an allocation before it is
// checked against its limit, and slices grow as their elements arrive
// (never beyond four times what arrived), so a damaged length or count
// cannot make Read allocate gigabytes.
//
// Read checks magic and version first (ErrMagic, ErrVersion), then the
// structure as it streams and the checksum at the end, so a damaged
// snapshot is reported by the first check it fails: often the checksum,
// sometimes a length or an ordering rule. Either way the error matches
// ErrCorrupt and names the byte offset. An I/O error of the reader is
// returned wrapped, matching none of the sentinels.
//
// Write refuses, before writing anything, a State that Read would refuse
// (ErrInvalid): a snapshot that cannot be restored is worse than none,
// because Raft compacts its log after a snapshot.
//
// Whether a range parses and whether data has bits at or beyond the pool's
// size are checked by the state machine with package allocator, not here.
//
// The encoding is canonical: varints are minimal, flags have no spare bit
// set, and data's leading zero bytes are kept as given, so Write(Read(b))
// reproduces b for every b that Read accepts. Empty slices and byte strings
// decode as nil.
package snapshot
