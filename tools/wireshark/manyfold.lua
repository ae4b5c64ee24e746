-- manyfold.lua: a Wireshark / tshark dissector for manyfold (docs/spec.md).
--
-- Decodes every datagram manyfold puts on the wire:
--   * the 24-byte header and its CRC32C (spec §3.1, §3.2), verified;
--   * a segment's payload sections: SACK block, handshake parameters,
--     cookie, error code (spec §3.3), and the chunks of its data area:
--     DATA, RESET, STOP, CREDIT, ABANDON, PAD (spec §13.2), HANDSHAKE
--     (a Noise message, spec §19.2), ACK_FREQUENCY (spec §5.6), an
--     abort's REASON in words (spec §3.3.4) and a resend's RESENT count
--     (spec §5.4.2), which the SACK block's echo answers (spec §3.3.1).
--     Connections, groups (spec §14) and request/reply sessions (spec §15)
--     are all segments on the wire;
--   * protected segments, type 10 (spec §19.3): the header in the clear,
--     the packet number, the encrypted payload and the Poly1305 tag (the
--     payload cannot be decoded without the connection's keys);
--   * the multicast session's packets, types 1-9: ANNOUNCE, REGISTER,
--     REGISTER+ACK, GROUP (REGISTER+ACK with KLV), DATA, ACK, NACK,
--     REPAIR, STATUS (with its loss-signature trailer), END, PARITY
--     (spec §16.2, §16.9, §16.12);
--   * protected multicast sessions (spec §19.7): the clear key exchange
--     (INVITE, REGISTER+CKE with Noise message 1, REGISTER+ACK+CKE with
--     message 2) and sealed packets, type 11 (source, packet number, the
--     encrypted inner packet, the tag).
-- The layouts follow the encoders in crates/manyfold-proto/src/wire/ and
-- crates/manyfold-proto/src/wire/mcast.rs byte for byte.
--
-- Two files: this one (the header, segments, protected and path packets,
-- the datagram, registration) and manyfold_mcast.lua (the multicast
-- session's packets), which this one loads from its own directory. Keep
-- them together. Install, either:
--   mkdir -p ~/.local/lib/wireshark/plugins
--   cp tools/wireshark/*.lua ~/.local/lib/wireshark/plugins/
-- or load it for one run (the other file is found beside it):
--   tshark -X lua_script:tools/wireshark/manyfold.lua -r capture.pcap
--   wireshark -X lua_script:tools/wireshark/manyfold.lua capture.pcap
--
-- It claims UDP datagrams on the ports of the preference "manyfold.ports"
-- (default: the CLI's default ports) and, through a heuristic, on any port
-- when the datagram has version 1, a known type and exactly 24 + payload
-- length bytes. Wireshark tries port dissectors before heuristics unless
-- "udp.try_heuristic_first" is set; use it (or Decode As, or
-- `-d udp.port==N,manyfold`) when a port of yours belongs to another
-- protocol. Filter names all start with "manyfold."; see README.md here.

local mf = Proto("manyfold", "manyfold reliable transport over UDP")

-- Bit operations: Wireshark ships the `bit` library (LuaBitOp) everywhere;
-- Lua 5.2 builds also have bit32. Results are normalized to unsigned.
local bitlib = bit32 or bit
local band, bor, bxor, rshift = bitlib.band, bitlib.bor, bitlib.bxor, bitlib.rshift

local function u32(x)
    if x < 0 then
        return x + 4294967296
    end
    return x
end

---------------------------------------------------------------------------
-- Constants (crates/manyfold-proto/src/wire/header.rs, chunk.rs, payload.rs,
-- mcast.rs)
---------------------------------------------------------------------------

local HEADER_LEN = 24
local VERSION = 1
local MAX_SACK_RANGES = 16
-- the SACK count byte (spec §3.3.1): the high bit says an echo (spec
-- §5.4.2) follows the ranges, the low seven bits count the ranges.
local SACK_ECHO = 0x80
local SACK_RANGES_MASK = 0x7f
local ECHO_LEN = 5 -- the echo: sequence number u32, RESENT count u8
local RESENT_LEN = 2 -- the RESENT chunk: kind, count (spec §5.4.2)
local PARAMS_LEN = 8
local COOKIE_LEN = 20
local DATA_HEADER_LEN = 16
local HANDSHAKE_HEADER_LEN = 4
local MAX_HANDSHAKE_MESSAGE = 256 -- secure.rs: longest Noise message accepted
local MAX_CLOSE_REASON = 256 -- chunk.rs: longest reason in words taken (spec §3.3.4)
local PN_LEN = 8 -- protected packet: packet number (spec §19.3)
local TAG_LEN = 16 -- protected packet: Poly1305 tag
-- handshake parameters' feature bits (spec §3.3.2)
local FEATURE_PROTECTED = 0x0001
local FEATURE_ACK_FREQUENCY = 0x0002
local FEATURE_TOKEN = 0x0004
local FEATURE_WANT_TOKEN = 0x0008
local FEATURE_EARLY = 0x0010
local FEATURE_TX_ECHO = 0x0020
local FEATURES_KNOWN = 0xff3f -- bits 8-15: the transmission (spec §3.3.2)
local TOKEN_LEN = 12 -- the token section (spec §3.3.5)
local MAX_OFFSET = 281474976710655 -- 2^48 - 1, exact in a Lua double

local F_SYN, F_ACK, F_FIN, F_RST = 0x01, 0x02, 0x04, 0x08
local F_KLV, F_ERR, F_SCK, F_CKE = 0x10, 0x20, 0x40, 0x80

local C_BEGIN, C_END, C_UNORDERED, C_FIN = 0x01, 0x02, 0x04, 0x08
local C_ALL = 0x0f

local packet_types = {
    [0] = "Segment",
    [1] = "ANNOUNCE",
    [2] = "REGISTER",
    [3] = "DATA",
    [4] = "ACK",
    [5] = "NACK",
    [6] = "REPAIR",
    [7] = "STATUS",
    [8] = "END",
    [9] = "PARITY",
    [10] = "PROTECTED",
    [11] = "SEALED",
    [12] = "PATH",
}
local MAX_TYPE = 12

-- wire::ErrorCode (spec §8.3 for connections, §16.7 for multicast), and the
-- application codes manyfold itself sends in RESET/STOP chunks.
local error_codes = {
    [1] = "APPLICATION",
    [2] = "PROTOCOL_VIOLATION",
    [3] = "REFUSED",
    [4] = "IDLE_TIMEOUT",
    [5] = "STREAM_LIMIT",
    [6] = "EVICTED",
    [7] = "WINDOW_TIMEOUT",
    [8] = "PROTECTION_MISMATCH",
    [9] = "AUTHENTICATION_FAILED",
    [10] = "INTERRUPTED",
    [20] = "HASH_MISMATCH",
    [21] = "INCOMPLETE",
    [22] = "UNRESPONSIVE",
    [23] = "TOO_MANY_PASSES",
    [24] = "TOO_LOSSY",
    [25] = "ABORTED",
    [26] = "TOO_SLOW",
}

local stream_codes = {
    [5] = "STREAM_LIMIT",
    [413] = "REQUEST_TOO_LARGE",
    [0x4654] = "STREAM_ABANDONED (ftp)",
}

local chunk_kinds = {
    [0] = "DATA",
    [1] = "RESET",
    [2] = "STOP",
    [3] = "CREDIT",
    [4] = "ABANDON",
    [5] = "PAD",
    [6] = "HANDSHAKE",
    [7] = "ACK_FREQUENCY",
    [8] = "REASON",
    [9] = "RESENT",
}

local crc_status_names = { [0] = "Bad", [1] = "Good", [2] = "Unverified" }

---------------------------------------------------------------------------
-- Fields
---------------------------------------------------------------------------

local f = {}
local function field(key, pf)
    f[key] = pf
end

-- What the packet is, by its role (spec §3.1's table, §16.2's names).
field("packet", ProtoField.string("manyfold.packet", "Packet"))

-- Header (spec §3.1)
field("version", ProtoField.uint8("manyfold.version", "Version", base.DEC, nil, 0xf0))
field("type", ProtoField.uint8("manyfold.type", "Type", base.DEC, packet_types, 0x0f))
field("flags", ProtoField.uint8("manyfold.flags", "Flags", base.HEX))
field("flags_syn", ProtoField.bool("manyfold.flags.syn", "SYN", 8, nil, F_SYN, "handshake; parameters present"))
field("flags_ack", ProtoField.bool("manyfold.flags.ack", "ACK", 8, nil, F_ACK, "ack and window valid"))
field("flags_fin", ProtoField.bool("manyfold.flags.fin", "FIN", 8, nil, F_FIN, "last sequenced packet"))
field("flags_rst", ProtoField.bool("manyfold.flags.rst", "RST", 8, nil, F_RST, "reset"))
field("flags_klv", ProtoField.bool("manyfold.flags.klv", "KLV", 8, nil, F_KLV, "asks for an immediate ack"))
field("flags_err", ProtoField.bool("manyfold.flags.err", "ERR", 8, nil, F_ERR, "error code present"))
field("flags_sck", ProtoField.bool("manyfold.flags.sck", "SCK", 8, nil, F_SCK, "SACK block present"))
field("flags_cke", ProtoField.bool("manyfold.flags.cke", "CKE", 8, nil, F_CKE, "cookie present"))
field("length", ProtoField.uint16("manyfold.length", "Payload length", base.DEC))
field("conn_id", ProtoField.uint32("manyfold.conn_id", "Destination connection id", base.HEX))
field("seq", ProtoField.uint32("manyfold.seq", "Sequence number", base.DEC))
field("ack", ProtoField.uint32("manyfold.ack", "Acknowledgement number", base.DEC))
field("window", ProtoField.uint32("manyfold.window", "Receive window", base.DEC))
field("crc", ProtoField.uint32("manyfold.crc", "CRC32C", base.HEX))
field("crc_calc", ProtoField.uint32("manyfold.crc.calculated", "Calculated CRC32C", base.HEX))
field("crc_status", ProtoField.uint8("manyfold.crc.status", "CRC32C status", base.DEC, crc_status_names))

-- Sections (spec §3.3)
field("sack", ProtoField.bytes("manyfold.sack", "SACK block"))
field("sack_echo", ProtoField.bool("manyfold.sack.echo", "ECHO", 8, nil, SACK_ECHO,
    "an echo follows the ranges (spec §5.4.2)"))
field("sack_count", ProtoField.uint8("manyfold.sack.count", "Ranges", base.DEC, nil, SACK_RANGES_MASK))
field("sack_start", ProtoField.uint32("manyfold.sack.start", "Start", base.DEC))
field("sack_end", ProtoField.uint32("manyfold.sack.end", "End", base.DEC))
field("sack_echo_seq", ProtoField.uint32("manyfold.sack.echo.seq", "Echoed sequence number", base.DEC))
field(
    "sack_echo_count",
    ProtoField.uint8("manyfold.sack.echo.count", "Echoed RESENT count", base.DEC, nil, nil,
        "which transmission of that packet arrived: 0 the first, n its n-th resend")
)
field("params", ProtoField.bytes("manyfold.params", "Handshake parameters"))
field("params_conn_id", ProtoField.uint32("manyfold.params.conn_id", "Connection id", base.HEX))
field("params_max_datagram", ProtoField.uint16("manyfold.params.max_datagram", "Max datagram", base.DEC))
field("params_features", ProtoField.uint16("manyfold.params.features", "Features", base.HEX))
field(
    "params_protected",
    ProtoField.bool("manyfold.params.features.protected", "PROTECTED", 16, nil, FEATURE_PROTECTED,
        "the sender encrypts its packets and accepts nothing else (spec §19)")
)
field(
    "params_ack_frequency",
    ProtoField.bool("manyfold.params.features.ack_frequency", "ACK_FREQUENCY", 16, nil, FEATURE_ACK_FREQUENCY,
        "the sender takes ACK_FREQUENCY chunks (spec §5.6)")
)
field(
    "params_token",
    ProtoField.bool("manyfold.params.features.token", "TOKEN", 16, nil, FEATURE_TOKEN,
        "a token section follows the parameters (spec §3.3.5)")
)
field(
    "params_want_token",
    ProtoField.bool("manyfold.params.features.want_token", "WANT_TOKEN", 16, nil, FEATURE_WANT_TOKEN,
        "the client asks for a token (spec §6.9)")
)
field(
    "params_early",
    ProtoField.bool("manyfold.params.features.early", "EARLY", 16, nil, FEATURE_EARLY,
        "the listener took the SYN's data (0-RTT, spec §6.9)")
)
field(
    "params_tx_echo",
    ProtoField.bool("manyfold.params.features.tx_echo", "TX_ECHO", 16, nil, FEATURE_TX_ECHO,
        "the sender takes RESENT chunks and echoes (spec §5.4.2)")
)
field(
    "params_transmission",
    ProtoField.uint16("manyfold.params.features.transmission", "Transmission (0 = the first)", base.DEC, nil, 0xff00,
        "which transmission of its packet this SYN or SYN-ACK is (spec §3.3.2, §5.4.2)")
)
field("token", ProtoField.bytes("manyfold.token", "Token"))
field("token_timestamp", ProtoField.uint32("manyfold.token.timestamp", "Timestamp (ms)", base.DEC))
field("token_mac", ProtoField.uint64("manyfold.token.mac", "MAC", base.HEX))
field("cookie", ProtoField.bytes("manyfold.cookie", "Cookie"))
field("cookie_timestamp", ProtoField.uint32("manyfold.cookie.timestamp", "Timestamp (ms)", base.DEC))
field("cookie_client_id", ProtoField.uint32("manyfold.cookie.client_id", "Client connection id", base.HEX))
field("cookie_max_datagram", ProtoField.uint16("manyfold.cookie.max_datagram", "Client max datagram", base.DEC))
field("cookie_echo_delay", ProtoField.uint16("manyfold.cookie.echo_delay", "Echo delay (ms after the SYN-ACK; 0 in a SYN-ACK)", base.DEC))
field("cookie_mac", ProtoField.uint64("manyfold.cookie.mac", "MAC (SipHash-2-4)", base.HEX))
field("error", ProtoField.uint16("manyfold.error", "Error code", base.DEC, error_codes))

-- Chunks (spec §13.2)
field("chunk", ProtoField.bytes("manyfold.chunk", "Chunk"))
field("chunk_kind", ProtoField.uint8("manyfold.chunk.kind", "Kind", base.DEC, chunk_kinds))
field("chunk_flags", ProtoField.uint8("manyfold.chunk.flags", "Flags", base.HEX))
field("chunk_begin", ProtoField.bool("manyfold.chunk.flags.begin", "BEGIN", 8, nil, C_BEGIN, "first byte of a message"))
field("chunk_end", ProtoField.bool("manyfold.chunk.flags.end", "END", 8, nil, C_END, "last byte of a message"))
field(
    "chunk_unordered",
    ProtoField.bool("manyfold.chunk.flags.unordered", "UNORDERED", 8, nil, C_UNORDERED, "unordered offset space")
)
field("chunk_fin", ProtoField.bool("manyfold.chunk.flags.fin", "FIN", 8, nil, C_FIN, "the stream's last byte"))
field("chunk_stream", ProtoField.uint16("manyfold.chunk.stream", "Stream", base.DEC))
field("chunk_length", ProtoField.uint16("manyfold.chunk.length", "Length", base.DEC))
field("chunk_offset", ProtoField.uint64("manyfold.chunk.offset", "Offset", base.DEC))
field("chunk_in_msg", ProtoField.uint32("manyfold.chunk.in_msg", "Offset within message", base.DEC))
field("chunk_data", ProtoField.bytes("manyfold.chunk.data", "Data"))
field("chunk_code", ProtoField.uint16("manyfold.chunk.code", "Code", base.DEC, stream_codes))
field("chunk_final_size", ProtoField.uint64("manyfold.chunk.final_size", "Final size", base.DEC))
field("chunk_max", ProtoField.uint64("manyfold.chunk.max", "Max offset", base.DEC))
field("chunk_start", ProtoField.uint64("manyfold.chunk.start", "Start", base.DEC))
field("chunk_end_off", ProtoField.uint64("manyfold.chunk.end", "End", base.DEC))
field("handshake_length", ProtoField.uint16("manyfold.handshake.length", "Noise message length", base.DEC))
field("handshake_message", ProtoField.bytes("manyfold.handshake.message", "Noise message"))
field("ackfreq_threshold", ProtoField.uint16("manyfold.ackfreq.threshold", "Ack-eliciting threshold (packets)", base.DEC))
field("ackfreq_seq", ProtoField.uint32("manyfold.ackfreq.seq", "Request number", base.DEC))
field("ackfreq_max_delay", ProtoField.uint32("manyfold.ackfreq.max_delay", "Max ack delay (us)", base.DEC))
field("reason_length", ProtoField.uint16("manyfold.reason.length", "Reason length", base.DEC))
field("reason", ProtoField.string("manyfold.reason", "Reason (the aborting application's words)", base.UNICODE))
field("resent_count", ProtoField.uint8("manyfold.resent.count", "Resend (1 = the first)", base.DEC))
field("handshake_which", ProtoField.string("manyfold.handshake.which", "Which message"))

-- PATH packet (spec §6.8)
field("path_kind", ProtoField.uint8("manyfold.path.kind", "Kind", base.DEC, { [1] = "CHALLENGE", [2] = "RESPONSE" }))
field("path_token", ProtoField.bytes("manyfold.path.token", "Token"))

-- Protected segment (spec §19.3)
field("pn", ProtoField.uint64("manyfold.protected.pn", "Packet number", base.DEC))
field("encrypted", ProtoField.bytes("manyfold.protected.payload", "Encrypted payload"))
field("encrypted_len", ProtoField.uint16("manyfold.protected.payload_len", "Encrypted payload length", base.DEC))
field("tag", ProtoField.bytes("manyfold.protected.tag", "Tag (Poly1305)"))

---------------------------------------------------------------------------
-- Expert info
---------------------------------------------------------------------------

local ex = {
    truncated = ProtoExpert.new(
        "manyfold.truncated",
        "Datagram shorter than its header or payload length",
        expert.group.MALFORMED,
        expert.severity.ERROR
    ),
    trailing = ProtoExpert.new(
        "manyfold.trailing",
        "Datagram longer than 24 + payload length",
        expert.group.MALFORMED,
        expert.severity.ERROR
    ),
    version = ProtoExpert.new("manyfold.bad_version", "Unsupported version", expert.group.MALFORMED, expert.severity.ERROR),
    ptype = ProtoExpert.new("manyfold.bad_type", "Unknown packet type", expert.group.MALFORMED, expert.severity.ERROR),
    checksum = ProtoExpert.new("manyfold.crc.bad", "Bad CRC32C", expert.group.CHECKSUM, expert.severity.ERROR),
    malformed = ProtoExpert.new("manyfold.malformed", "Malformed", expert.group.MALFORMED, expert.severity.ERROR),
    partial = ProtoExpert.new(
        "manyfold.partial_capture",
        "Datagram captured only in part (snap length); not checked",
        expert.group.UNDECODED,
        expert.severity.WARN
    ),
    reset = ProtoExpert.new("manyfold.reset", "Reset", expert.group.SEQUENCE, expert.severity.NOTE),
    note = ProtoExpert.new("manyfold.note", "Note", expert.group.PROTOCOL, expert.severity.NOTE),
    batch = ProtoExpert.new(
        "manyfold.gso_batch",
        "Several datagrams in one captured packet (UDP GSO)",
        expert.group.REASSEMBLE,
        expert.severity.NOTE
    ),
    lua = ProtoExpert.new(
        "manyfold.dissector_bug",
        "manyfold.lua failed on this packet",
        expert.group.MALFORMED,
        expert.severity.ERROR
    ),
}
mf.experts = { ex.truncated, ex.trailing, ex.version, ex.ptype, ex.checksum, ex.malformed, ex.partial, ex.reset, ex.note, ex.batch, ex.lua }

---------------------------------------------------------------------------
-- Preferences
---------------------------------------------------------------------------

local DEFAULT_PORTS = "7007-7010,7020-7021"
mf.prefs.ports = Pref.range("UDP ports", DEFAULT_PORTS, "UDP ports decoded as manyfold (besides the heuristic)", 65535)
mf.prefs.heuristic = Pref.bool("Heuristic on any UDP port", true, "Claim datagrams that look like manyfold on any port")
mf.prefs.check_crc = Pref.bool("Verify CRC32C", true, "Compute each datagram's CRC32C and flag mismatches")

---------------------------------------------------------------------------
-- CRC32C (spec §3.2): reflected 0x82F63B78, init and final xor all ones,
-- over the datagram with bytes 20-23 taken as zero.
---------------------------------------------------------------------------

local crc_table = {}
for i = 0, 255 do
    local c = i
    for _ = 1, 8 do
        if band(c, 1) ~= 0 then
            c = bxor(rshift(c, 1), 0x82F63B78)
        else
            c = rshift(c, 1)
        end
    end
    crc_table[i] = c
end

local function crc32c_update(crc, s)
    local n = #s
    local i = 1
    while i <= n do
        local j = math.min(i + 255, n)
        local bytes = { string.byte(s, i, j) }
        for k = 1, #bytes do
            crc = bxor(rshift(crc, 8), crc_table[band(bxor(crc, bytes[k]), 0xff)])
        end
        i = j + 1
    end
    return crc
end

local function datagram_crc(tvb)
    local crc = 0xffffffff
    crc = crc32c_update(crc, tvb:raw(0, 20))
    crc = crc32c_update(crc, "\0\0\0\0")
    if tvb:len() > HEADER_LEN then
        crc = crc32c_update(crc, tvb:raw(HEADER_LEN, tvb:len() - HEADER_LEN))
    end
    return u32(bxor(crc, 0xffffffff))
end

---------------------------------------------------------------------------
-- Helpers
---------------------------------------------------------------------------

local function has(flags, bit_)
    return band(flags, bit_) ~= 0
end

local function flag_names(flags)
    local names = {}
    for _, p in ipairs({
        { F_SYN, "SYN" },
        { F_ACK, "ACK" },
        { F_FIN, "FIN" },
        { F_RST, "RST" },
        { F_KLV, "KLV" },
        { F_ERR, "ERR" },
        { F_SCK, "SCK" },
        { F_CKE, "CKE" },
    }) do
        if has(flags, p[1]) then
            names[#names + 1] = p[2]
        end
    end
    if #names == 0 then
        return "-"
    end
    return table.concat(names, "|")
end

local function chunk_flag_names(flags)
    local names = {}
    for _, p in ipairs({ { C_BEGIN, "BEGIN" }, { C_END, "END" }, { C_UNORDERED, "UNORDERED" }, { C_FIN, "FIN" } }) do
        if has(flags, p[1]) then
            names[#names + 1] = p[2]
        end
    end
    return table.concat(names, "|")
end

-- A 48-bit big-endian value as a Lua number (exact below 2^53).
local function u48(range)
    return range:bitfield(0, 16) * 4294967296 + range(2, 4):uint()
end

local function bad(tree, item, text)
    (item or tree):add_proto_expert_info(ex.malformed, text)
end

-- Adds the flags byte with one boolean per bit.
local function add_flags(tree, range, flags)
    local ft = tree:add(f.flags, range)
    ft:append_text(" (" .. flag_names(flags) .. ")")
    for _, k in ipairs({ "syn", "ack", "fin", "rst", "klv", "err", "sck", "cke" }) do
        ft:add(f["flags_" .. k], range)
    end
end

---------------------------------------------------------------------------
-- Segments (spec §3.3, §13.2)
---------------------------------------------------------------------------

-- Which Noise XX message a HANDSHAKE chunk holds (spec §19.2). The
-- client's first rides on the cookie echo; the other two are told apart
-- by length (the messages carry no payload): the listener's (e, ee, s, es)
-- is 96 bytes, the client's second (s, se) 64.
local function noise_message(len, cke)
    if cke then
        return "1 of 3 (client: e)"
    elseif len == 96 then
        return "2 of 3 (listener: e, ee, s, es)"
    elseif len == 64 then
        return "3 of 3 (client: s, se)"
    end
    return "unknown (not the length of a manyfold XX message)"
end

-- Parses the chunks of a data area; returns the summary strings, the
-- number of chunks, how many of them are DATA, whether they were all
-- well formed, how many are HANDSHAKE and how many RESENT. `cke`: the
-- packet is a cookie echo (for naming a Noise message).
local function dissect_chunks(tvb, tree, at, stop, cke)
    local summary = {}
    local count, ndata, nhandshake, nresent = 0, 0, 0, 0
    while at < stop do
        local left = stop - at
        local kind = tvb(at, 1):uint()
        local name = chunk_kinds[kind] or ("kind " .. kind)
        count = count + 1
        local fixed = ({ [0] = DATA_HEADER_LEN, [1] = 12, [2] = 6, [3] = 10, [4] = 16, [5] = 1, [6] = HANDSHAKE_HEADER_LEN,
            [7] = 12, [8] = HANDSHAKE_HEADER_LEN, [9] = RESENT_LEN })[kind]
        if fixed == nil then
            local ct = tree:add(f.chunk, tvb(at, left))
            ct:set_text("Chunk of unknown kind " .. kind)
            ct:add(f.chunk_kind, tvb(at, 1))
            bad(ct, nil, "unknown chunk kind " .. kind)
            return summary, count, ndata, false, nhandshake, nresent
        end
        if left < fixed then
            local ct = tree:add(f.chunk, tvb(at, left))
            ct:set_text(name .. " chunk, truncated")
            ct:add(f.chunk_kind, tvb(at, 1))
            bad(ct, nil, string.format("%s chunk needs %d bytes, %d left", name, fixed, left))
            return summary, count, ndata, false, nhandshake, nresent
        end
        local size = fixed
        if kind == 0 then
            ndata = ndata + 1
            size = DATA_HEADER_LEN + tvb(at + 4, 2):uint()
            if left < size then
                local ct = tree:add(f.chunk, tvb(at, left))
                ct:set_text("DATA chunk, truncated")
                ct:add(f.chunk_kind, tvb(at, 1))
                ct:add(f.chunk_length, tvb(at + 4, 2))
                bad(ct, nil, string.format("DATA chunk of %d bytes runs past the payload (%d left)", size, left))
                return summary, count, ndata, false, nhandshake, nresent
            end
        elseif kind == 6 then
            nhandshake = nhandshake + 1
            size = HANDSHAKE_HEADER_LEN + tvb(at + 2, 2):uint()
            if left < size then
                local ct = tree:add(f.chunk, tvb(at, left))
                ct:set_text("HANDSHAKE chunk, truncated")
                ct:add(f.chunk_kind, tvb(at, 1))
                ct:add(f.handshake_length, tvb(at + 2, 2))
                bad(ct, nil, string.format("HANDSHAKE chunk of %d bytes runs past the payload (%d left)", size, left))
                return summary, count, ndata, false, nhandshake, nresent
            end
        elseif kind == 8 then
            size = HANDSHAKE_HEADER_LEN + tvb(at + 2, 2):uint()
            if left < size then
                local ct = tree:add(f.chunk, tvb(at, left))
                ct:set_text("REASON chunk, truncated")
                ct:add(f.chunk_kind, tvb(at, 1))
                ct:add(f.reason_length, tvb(at + 2, 2))
                bad(ct, nil, string.format("REASON chunk of %d bytes runs past the payload (%d left)", size, left))
                return summary, count, ndata, false, nhandshake, nresent
            end
        end
        local ct = tree:add(f.chunk, tvb(at, size))
        ct:add(f.chunk_kind, tvb(at, 1))
        local ok = true
        if kind == 5 then
            ct:set_text("PAD chunk")
            summary[#summary + 1] = "PAD"
        elseif kind == 7 then
            -- chunk.rs: [7][0][threshold u16][request number u32][max delay u32, us] (spec §5.6).
            local zi = ct:add(tvb(at + 1, 1), "Zero: " .. tvb(at + 1, 1):uint())
            local threshold = tvb(at + 2, 2):uint()
            local ti = ct:add(f.ackfreq_threshold, tvb(at + 2, 2))
            ct:add(f.ackfreq_seq, tvb(at + 4, 4))
            ct:add(f.ackfreq_max_delay, tvb(at + 8, 4))
            local seq, delay = tvb(at + 4, 4):uint(), tvb(at + 8, 4):uint()
            ct:set_text(string.format("ACK_FREQUENCY chunk: request %u, every %d packets or %u us", seq, threshold, delay))
            summary[#summary + 1] = string.format("ACKFREQ#%u %dpkts/%uus", seq, threshold, delay)
            if tvb(at + 1, 1):uint() ~= 0 then
                bad(zi, nil, "ACK_FREQUENCY chunk's second byte must be 0")
                ok = false
            end
            if threshold == 0 then
                bad(ti, nil, "ACK_FREQUENCY threshold of 0")
                ok = false
            end
        elseif kind == 9 then
            -- chunk.rs: [9][count u8], first in a resent packet (spec §5.4.2).
            nresent = nresent + 1
            local n = tvb(at + 1, 1):uint()
            local ri = ct:add(f.resent_count, tvb(at + 1, 1))
            ct:set_text(string.format("RESENT chunk: resend %d", n))
            summary[#summary + 1] = string.format("RESENT#%d", n)
            if n == 0 then
                bad(ri, nil, "RESENT count of 0 (1 to 255; a first transmission carries none)")
                ok = false
            elseif count > 1 then
                ct:add_proto_expert_info(ex.note,
                    "a RESENT chunk that is not the first chunk: manyfold ignores it (spec §5.4.2)")
            end
        elseif kind == 8 then
            -- chunk.rs: [8][0][length u16][UTF-8 text], on a RST (spec §3.3.4).
            local len = size - HANDSHAKE_HEADER_LEN
            local zi = ct:add(tvb(at + 1, 1), "Zero: " .. tvb(at + 1, 1):uint())
            ct:add(f.reason_length, tvb(at + 2, 2))
            local text = ""
            if len > 0 then
                text = tvb(at + HANDSHAKE_HEADER_LEN, len):string(ENC_UTF_8)
                ct:add(f.reason, tvb(at + HANDSHAKE_HEADER_LEN, len), text)
            end
            ct:set_text(string.format("REASON chunk: %q", text))
            summary[#summary + 1] = string.format("REASON %q", text)
            if tvb(at + 1, 1):uint() ~= 0 then
                bad(zi, nil, "REASON chunk's second byte must be 0")
                ok = false
            end
            if len > MAX_CLOSE_REASON then
                ct:add_proto_expert_info(ex.note, string.format(
                    "a reason of %d bytes: manyfold drops reasons over %d bytes (the RST still acts)", len, MAX_CLOSE_REASON))
            end
        elseif kind == 6 then
            -- chunk.rs: [6][0][length u16][Noise message] (spec §19.2).
            local len = size - HANDSHAKE_HEADER_LEN
            local zi = ct:add(tvb(at + 1, 1), "Zero: " .. tvb(at + 1, 1):uint())
            ct:add(f.handshake_length, tvb(at + 2, 2))
            local which = noise_message(len, cke)
            ct:add(f.handshake_which, which):set_generated()
            if len > 0 then
                ct:add(f.handshake_message, tvb(at + HANDSHAKE_HEADER_LEN, len))
            end
            ct:set_text(string.format("HANDSHAKE chunk: Noise message %s, %d bytes", which, len))
            summary[#summary + 1] = string.format("HANDSHAKE(msg %s, %d bytes)", string.sub(which, 1, 1), len)
            if tvb(at + 1, 1):uint() ~= 0 then
                bad(zi, nil, "HANDSHAKE chunk's second byte must be 0")
                ok = false
            end
            if len == 0 or len > MAX_HANDSHAKE_MESSAGE then
                ct:add_proto_expert_info(ex.note, string.format(
                    "a Noise message of %d bytes: manyfold accepts 1 to %d", len, MAX_HANDSHAKE_MESSAGE))
            end
        else
            local cflags = tvb(at + 1, 1):uint()
            local fr = ct:add(f.chunk_flags, tvb(at + 1, 1))
            if cflags ~= 0 then
                fr:append_text(" (" .. chunk_flag_names(cflags) .. ")")
            end
            fr:add(f.chunk_begin, tvb(at + 1, 1))
            fr:add(f.chunk_end, tvb(at + 1, 1))
            fr:add(f.chunk_unordered, tvb(at + 1, 1))
            fr:add(f.chunk_fin, tvb(at + 1, 1))
            local stream = tvb(at + 2, 2):uint()
            ct:add(f.chunk_stream, tvb(at + 2, 2))
            if kind == 0 then
                local len = tvb(at + 4, 2):uint()
                local offset = u48(tvb(at + 6, 6))
                local in_msg = tvb(at + 12, 4):uint()
                ct:add(f.chunk_length, tvb(at + 4, 2))
                ct:add(f.chunk_offset, tvb(at + 6, 6), UInt64.new(offset % 4294967296, math.floor(offset / 4294967296)))
                ct:add(f.chunk_in_msg, tvb(at + 12, 4))
                if len > 0 then
                    ct:add(f.chunk_data, tvb(at + DATA_HEADER_LEN, len))
                end
                ct:set_text(string.format("DATA chunk: stream %d, offset %.0f, %d bytes%s", stream, offset, len,
                    cflags ~= 0 and (" [" .. chunk_flag_names(cflags) .. "]") or ""))
                summary[#summary + 1] = string.format("s%d@%.0f+%d", stream, offset, len)
                if band(cflags, 0xff - C_ALL) ~= 0 then
                    bad(fr, nil, string.format("unknown data chunk flags 0x%02x", cflags))
                    ok = false
                end
                if offset + len > MAX_OFFSET then
                    bad(ct, nil, "offset + length beyond 2^48 - 1")
                    ok = false
                end
                if in_msg > offset then
                    bad(ct, nil, "offset within message above the offset")
                    ok = false
                end
            elseif kind == 1 or kind == 2 then
                local code = tvb(at + 4, 2):uint()
                ct:add(f.chunk_code, tvb(at + 4, 2))
                if kind == 1 then
                    local final = u48(tvb(at + 6, 6))
                    ct:add(f.chunk_final_size, tvb(at + 6, 6), UInt64.new(final % 4294967296, math.floor(final / 4294967296)))
                    ct:set_text(string.format("RESET chunk: stream %d, code %d, final size %.0f", stream, code, final))
                    summary[#summary + 1] = string.format("RESET s%d code=%d", stream, code)
                else
                    ct:set_text(string.format("STOP chunk: stream %d, code %d", stream, code))
                    summary[#summary + 1] = string.format("STOP s%d code=%d", stream, code)
                end
                -- chunk.rs ignores the flags byte of RESET and STOP (sent as 0).
            elseif kind == 3 then
                local max = u48(tvb(at + 4, 6))
                ct:add(f.chunk_max, tvb(at + 4, 6), UInt64.new(max % 4294967296, math.floor(max / 4294967296)))
                local space = has(cflags, C_UNORDERED) and " (unordered)" or ""
                ct:set_text(string.format("CREDIT chunk: stream %d, max %.0f%s", stream, max, space))
                summary[#summary + 1] = string.format("CREDIT s%d<%.0f%s", stream, max, has(cflags, C_UNORDERED) and "u" or "")
                if band(cflags, 0xff - C_UNORDERED) ~= 0 then
                    bad(fr, nil, string.format("unknown CREDIT flags 0x%02x", cflags))
                    ok = false
                end
            else -- 4, ABANDON
                local s, e = u48(tvb(at + 4, 6)), u48(tvb(at + 10, 6))
                ct:add(f.chunk_start, tvb(at + 4, 6), UInt64.new(s % 4294967296, math.floor(s / 4294967296)))
                ct:add(f.chunk_end_off, tvb(at + 10, 6), UInt64.new(e % 4294967296, math.floor(e / 4294967296)))
                ct:set_text(string.format("ABANDON chunk: stream %d, [%.0f, %.0f)", stream, s, e))
                summary[#summary + 1] = string.format("ABANDON s%d[%.0f,%.0f)", stream, s, e)
                if band(cflags, 0xff - C_UNORDERED) ~= 0 then
                    bad(fr, nil, string.format("unknown ABANDON flags 0x%02x", cflags))
                    ok = false
                end
                if s > e then
                    bad(ct, nil, "ABANDON start above end")
                    ok = false
                end
            end
        end
        if not ok then
            return summary, count, ndata, false, nhandshake, nresent
        end
        at = at + size
    end
    return summary, count, ndata, true, nhandshake, nresent
end

-- The packet's role, as in spec §3.1's table; HANDSHAKE: a plain packet
-- carrying a Noise message of a protected connection (spec §19.2).
local function segment_role(flags, error_code, chunks, data_chunks, handshakes)
    if has(flags, F_RST) then
        if error_code == 3 or error_code == 8 then
            -- REFUSED, PROTECTION_MISMATCH: the answer to a SYN or echo.
            return "REFUSAL"
        elseif error_code ~= nil then
            return "ABORT"
        end
        return "RST"
    elseif has(flags, F_SYN) and has(flags, F_ACK) then
        return "SYN-ACK"
    elseif has(flags, F_SYN) then
        return "SYN"
    elseif has(flags, F_CKE) then
        return "COOKIE-ECHO"
    elseif handshakes > 0 then
        return "HANDSHAKE"
    elseif has(flags, F_FIN) then
        return "FIN"
    elseif data_chunks > 0 then
        return "DATA"
    elseif chunks > 0 then
        -- Only stream control chunks (CREDIT, RESET, STOP, ABANDON, PAD).
        return "CONTROL"
    elseif has(flags, F_KLV) then
        return "PROBE"
    end
    return "ACK"
end

local function dissect_segment(tvb, pinfo, tree, ht, flags, stop)
    local conn_id = tvb(4, 4):uint()
    local seq, ackn, window = tvb(8, 4):uint(), tvb(12, 4):uint(), tvb(16, 4):uint()
    ht:add(f.conn_id, tvb(4, 4))
    ht:add(f.seq, tvb(8, 4))
    ht:add(f.ack, tvb(12, 4))
    ht:add(f.window, tvb(16, 4))

    local at = HEADER_LEN
    local ok = true
    local sack_text = ""
    local error_code = nil
    local function short(what, need)
        if stop - at < need then
            bad(tree, nil, string.format("%s needs %d bytes, %d left in the payload", what, need, stop - at))
            ok = false
            return true
        end
        return false
    end

    if ok and has(flags, F_SCK) and not short("SACK block", 1) then
        -- payload.rs: [ECHO bit | count N][N x (start u32, end u32)], then
        -- with ECHO [seq u32][RESENT count u8] (spec §3.3.1, §5.4.2).
        local b = tvb(at, 1):uint()
        local n, echoed = band(b, SACK_RANGES_MASK), has(b, SACK_ECHO)
        local len = 1 + 8 * n + (echoed and ECHO_LEN or 0)
        if n > MAX_SACK_RANGES or (n == 0 and not echoed) then
            local st = tree:add(f.sack, tvb(at, 1))
            st:add(f.sack_echo, tvb(at, 1))
            st:add(f.sack_count, tvb(at, 1))
            if n > MAX_SACK_RANGES then
                bad(st, nil, string.format("SACK count %d%s (at most %d)", n, echoed and " with ECHO" or "",
                    MAX_SACK_RANGES))
            else
                bad(st, nil, string.format("SACK count 0 without ECHO (1 to %d ranges, or 0 and an echo)",
                    MAX_SACK_RANGES))
            end
            ok = false
        elseif not short("SACK block", len) then
            local st = tree:add(f.sack, tvb(at, len))
            st:add(f.sack_echo, tvb(at, 1))
            st:add(f.sack_count, tvb(at, 1))
            local ranges = {}
            for i = 0, n - 1 do
                local o = at + 1 + 8 * i
                local s, e = tvb(o, 4):uint(), tvb(o + 4, 4):uint()
                st:add(f.sack_start, tvb(o, 4))
                st:add(f.sack_end, tvb(o + 4, 4))
                ranges[#ranges + 1] = string.format("%u-%u", s, e)
            end
            local text = n > 0 and table.concat(ranges, ", ") or "no range"
            if n > 0 then
                sack_text = " SACK=" .. table.concat(ranges, ",")
            end
            if echoed then
                -- The packet whose arrival this ack answers, and which of
                -- its transmissions that was (0: the first).
                local o = at + 1 + 8 * n
                local eseq, ecount = tvb(o, 4):uint(), tvb(o + 4, 1):uint()
                local which = ecount == 0 and "first transmission" or string.format("resend %d", ecount)
                local et = st:add(tvb(o, ECHO_LEN), string.format("Echo: seq %u, %s", eseq, which))
                et:add(f.sack_echo_seq, tvb(o, 4))
                et:add(f.sack_echo_count, tvb(o + 4, 1))
                text = string.format("%s; echo of seq %u, %s", text, eseq, which)
                sack_text = string.format("%s ECHO=%u/%d", sack_text, eseq, ecount)
            end
            st:set_text("SACK block: " .. text)
            at = at + len
        end
    end
    if ok and has(flags, F_SYN) and not short("Handshake parameters", PARAMS_LEN) then
        local pt = tree:add(f.params, tvb(at, PARAMS_LEN))
        local pid = tvb(at, 4):uint()
        pt:add(f.params_conn_id, tvb(at, 4))
        pt:add(f.params_max_datagram, tvb(at + 4, 2))
        local features = tvb(at + 6, 2):uint()
        local fi = pt:add(f.params_features, tvb(at + 6, 2))
        fi:add(f.params_protected, tvb(at + 6, 2))
        fi:add(f.params_ack_frequency, tvb(at + 6, 2))
        fi:add(f.params_token, tvb(at + 6, 2))
        fi:add(f.params_want_token, tvb(at + 6, 2))
        fi:add(f.params_early, tvb(at + 6, 2))
        fi:add(f.params_tx_echo, tvb(at + 6, 2))
        fi:add(f.params_transmission, tvb(at + 6, 2))
        if has(features, FEATURE_PROTECTED) then
            fi:append_text(" (PROTECTED)")
        end
        if band(features, 0xffff - FEATURES_KNOWN) ~= 0 then
            -- payload.rs keeps unknown bits without acting on them.
            fi:add_proto_expert_info(ex.note, string.format("unknown feature bits 0x%04x",
                band(features, 0xffff - FEATURES_KNOWN)))
        end
        pt:set_text(string.format("Handshake parameters: connection id %08x, max datagram %d%s", pid,
            tvb(at + 4, 2):uint(), has(features, FEATURE_PROTECTED) and ", PROTECTED" or ""))
        if pid == 0 then
            -- endpoint: a SYN whose parameters carry id 0 is malformed (spec §3.3.2).
            bad(pt, nil, "connection id 0 in the handshake parameters")
        end
        at = at + PARAMS_LEN
        if has(features, FEATURE_TOKEN) and not short("Token", TOKEN_LEN) then
            local tt = tree:add(f.token, tvb(at, TOKEN_LEN))
            tt:add(f.token_timestamp, tvb(at, 4))
            tt:add(f.token_mac, tvb(at + 4, 8))
            at = at + TOKEN_LEN
        end
    end
    if ok and has(flags, F_CKE) and not short("Cookie", COOKIE_LEN) then
        local ct = tree:add(f.cookie, tvb(at, COOKIE_LEN))
        ct:add(f.cookie_timestamp, tvb(at, 4))
        ct:add(f.cookie_client_id, tvb(at + 4, 4))
        ct:add(f.cookie_max_datagram, tvb(at + 8, 2))
        ct:add(f.cookie_echo_delay, tvb(at + 10, 2))
        ct:add(f.cookie_mac, tvb(at + 12, 8))
        at = at + COOKIE_LEN
    end
    if ok and has(flags, F_ERR) and not short("Error code", 2) then
        error_code = tvb(at, 2):uint()
        tree:add(f.error, tvb(at, 2))
        at = at + 2
    end

    local summary, nchunks, ndata, nhandshake, nresent = {}, 0, 0, 0, 0
    if ok and at < stop then
        local dt = tree:add(tvb(at, stop - at), "Data area")
        local chunks_ok
        summary, nchunks, ndata, chunks_ok, nhandshake, nresent = dissect_chunks(tvb, dt, at, stop, has(flags, F_CKE))
        dt:set_text(string.format("Data area: %d chunk%s, %d bytes", nchunks, nchunks == 1 and "" or "s", stop - at))
        ok = ok and chunks_ok
    end
    if conn_id == 0 and not (has(flags, F_SYN) and not has(flags, F_ACK) and not has(flags, F_RST)) then
        -- spec §3.5: destination id 0 only on an initial SYN.
        bad(tree, nil, "destination connection id 0 on a packet that is not an initial SYN")
    end

    -- A resend has its first transmission's role: a RESENT chunk alone
    -- does not make a packet CONTROL (spec §5.4.2).
    local role = segment_role(flags, error_code, nchunks - nresent, ndata, nhandshake)
    tree:add(f.packet, role):set_generated()
    if has(flags, F_RST) then
        tree:add_proto_expert_info(ex.reset, role .. (error_code and (" with code " .. (error_codes[error_code] or error_code)) or ""))
    end
    local info = string.format("%s [%s] conn=%08x seq=%u ack=%u win=%u len=%d%s", role, flag_names(flags), conn_id, seq,
        ackn, window, stop, sack_text)
    if error_code then
        info = info .. " error=" .. (error_codes[error_code] or tostring(error_code))
    end
    if #summary > 0 then
        info = info .. " " .. table.concat(summary, " ")
    end
    return info, role
end

-- A protected segment (spec §19.3): the header as a segment's, in the
-- clear and authenticated; then the packet number (u64), the encrypted
-- payload sections and the 16-byte Poly1305 tag. The header (bytes 0-19)
-- and the packet number are the associated data.
local function dissect_protected(tvb, pinfo, tree, ht, flags, stop)
    local conn_id = tvb(4, 4):uint()
    local seq, ackn, window = tvb(8, 4):uint(), tvb(12, 4):uint(), tvb(16, 4):uint()
    ht:add(f.conn_id, tvb(4, 4))
    ht:add(f.seq, tvb(8, 4))
    ht:add(f.ack, tvb(12, 4))
    ht:add(f.window, tvb(16, 4))
    local role = "PROTECTED"
    tree:add(f.packet, role):set_generated()
    local head = string.format("%s [%s] conn=%08x seq=%u ack=%u win=%u", role, flag_names(flags), conn_id, seq, ackn,
        window)
    local plen = stop - HEADER_LEN
    if plen < PN_LEN + TAG_LEN then
        local pt = tree:add(tvb(HEADER_LEN, plen), "Protected payload, truncated")
        bad(pt, nil, string.format("a protected packet needs %d bytes after the header (packet number and tag), has %d",
            PN_LEN + TAG_LEN, plen))
        return head .. " malformed", role
    end
    local pn = tostring(tvb(HEADER_LEN, PN_LEN):uint64())
    tree:add(f.pn, tvb(HEADER_LEN, PN_LEN))
    local elen = plen - PN_LEN - TAG_LEN
    local et
    if elen > 0 then
        et = tree:add(f.encrypted, tvb(HEADER_LEN + PN_LEN, elen))
    else
        et = tree:add(tvb(HEADER_LEN + PN_LEN, 0), "Encrypted payload")
    end
    et:set_text(string.format("Encrypted payload (%d bytes): the segment's sections and chunks", elen))
    tree:add(f.encrypted_len, elen):set_generated()
    tree:add(f.tag, tvb(stop - TAG_LEN, TAG_LEN))
    if conn_id == 0 then
        bad(tree, nil, "destination connection id 0 on a protected packet")
    end
    return string.format("%s len=%d pn=%s encrypted=%d", head, stop, pn, elen), role
end

-- A path challenge or response (spec §6.8): header, kind, 8-byte token.
local function dissect_path(tvb, pinfo, tree, ht, flags, stop)
    local conn_id = tvb(4, 4):uint()
    ht:add(f.conn_id, tvb(4, 4))
    ht:add(f.seq, tvb(8, 4))
    ht:add(f.ack, tvb(12, 4))
    if stop ~= HEADER_LEN + 9 then
        bad(tree, nil, string.format("a PATH packet is %d bytes, this one %d", HEADER_LEN + 9, stop))
        return string.format("PATH conn=%08x malformed", conn_id), "PATH"
    end
    local kind = tvb(HEADER_LEN, 1):uint()
    local names = { [1] = "CHALLENGE", [2] = "RESPONSE" }
    local role = "PATH " .. (names[kind] or "?")
    local kt = tree:add(f.path_kind, tvb(HEADER_LEN, 1))
    if names[kind] == nil then
        bad(kt, nil, "kind " .. kind .. " is neither 1 (challenge) nor 2 (response)")
    end
    tree:add(f.path_token, tvb(HEADER_LEN + 1, 8))
    tree:add(f.packet, role):set_generated()
    return string.format("%s conn=%08x token=%s", role, conn_id, tostring(tvb(HEADER_LEN + 1, 8):bytes())), role
end

---------------------------------------------------------------------------
-- The multicast half (manyfold_mcast.lua, beside this file)
---------------------------------------------------------------------------

-- This file's directory: from the path Wireshark loaded it by (relative
-- with `-X lua_script:tools/wireshark/manyfold.lua`, absolute from a
-- plugins folder); the plugins folders are the fallback when a build
-- hides the path.
local function sibling_paths(name)
    local paths = {}
    -- Level 1: this function, defined in this file (not through pcall,
    -- whose level 1 would be pcall itself).
    local info = debug and debug.getinfo and debug.getinfo(1, "S")
    local dir = info and info.source and string.match(info.source, "^@(.*[/\\])")
    if dir then
        paths[#paths + 1] = dir .. name
    end
    for _, folder in ipairs({ Dir.personal_plugins_path(), Dir.global_plugins_path() }) do
        local path = folder .. "/" .. name
        if path ~= paths[1] then
            paths[#paths + 1] = path
        end
    end
    return paths
end

local function load_part(name, shared)
    local tried = {}
    for _, path in ipairs(sibling_paths(name)) do
        local ok, chunk, err = pcall(loadfile, path)
        if ok and chunk then
            return chunk(shared)
        end
        tried[#tried + 1] = path .. ((ok and err) and (" (" .. tostring(err) .. ")") or "")
    end
    error("manyfold.lua needs " .. name .. " in its own directory; tried: " .. table.concat(tried, ", "))
end

local mcast = load_part("manyfold_mcast.lua", {
    part_of = "manyfold",
    f = f,
    field = field,
    ex = ex,
    bad = bad,
    has = has,
    flag_names = flag_names,
    band = band,
    HEADER_LEN = HEADER_LEN,
    PN_LEN = PN_LEN,
    TAG_LEN = TAG_LEN,
    F_ACK = F_ACK,
    F_FIN = F_FIN,
    F_KLV = F_KLV,
    F_ERR = F_ERR,
    F_CKE = F_CKE,
    packet_types = packet_types,
    error_codes = error_codes,
})
local dissect_mcast, dissect_sealed = mcast.dissect_mcast, mcast.dissect_sealed

-- Every field of both halves, registered at once.
local field_list = {}
for _, pf in pairs(f) do
    field_list[#field_list + 1] = pf
end
mf.fields = field_list

---------------------------------------------------------------------------
-- The datagram
---------------------------------------------------------------------------

-- Splits a captured UDP payload into manyfold datagrams, or returns nil
-- when it is not a run of plausible ones (version 1, a known type, each
-- exactly 24 + payload length bytes). Normally there is one. A sender that
-- uses UDP GSO (segmentation offload) is captured before the kernel cuts
-- its send into datagrams: one captured packet then holds several,
-- back to back, all of one size but the last, which may be shorter.
local function split_datagrams(tvb)
    local n = tvb:len()
    if n ~= tvb:reported_len() then
        return nil
    end
    local at, parts = 0, {}
    while at < n do
        if n - at < HEADER_LEN then
            return nil
        end
        local b0 = tvb(at, 1):uint()
        if rshift(b0, 4) ~= VERSION or band(b0, 0x0f) > MAX_TYPE then
            return nil
        end
        local size = HEADER_LEN + tvb(at + 2, 2):uint()
        if size > n - at then
            return nil
        end
        parts[#parts + 1] = { at, size }
        at = at + size
    end
    for i = 2, #parts do
        if (i < #parts and parts[i][2] ~= parts[1][2]) or parts[i][2] > parts[1][2] then
            return nil
        end
    end
    return parts
end

local function looks_like_manyfold(tvb)
    return split_datagrams(tvb) ~= nil
end

-- Dissects one datagram (all of `tvb`); returns the Info column text.
local function dissect_datagram(tvb, pinfo, root, tree)
    local captured = tvb:len()
    if captured < HEADER_LEN then
        tree:add_proto_expert_info(ex.truncated, string.format("%d bytes: shorter than the 24-byte header", captured))
        return "manyfold: truncated"
    end
    local partial = captured < tvb:reported_len()
    local b0 = tvb(0, 1):uint()
    local version, ptype = rshift(b0, 4), band(b0, 0x0f)
    local flags = tvb(1, 1):uint()
    local plen = tvb(2, 2):uint()

    local ht = tree:add(tvb(0, HEADER_LEN), "Header")
    local vi = ht:add(f.version, tvb(0, 1))
    local ti = ht:add(f.type, tvb(0, 1))
    add_flags(ht, tvb(1, 1), flags)
    local li = ht:add(f.length, tvb(2, 2))

    -- Length (spec §3.1): exactly 24 + payload length.
    local total = HEADER_LEN + plen
    local stop = math.min(total, captured)
    if partial then
        tree:add_proto_expert_info(ex.partial)
    elseif tvb:reported_len() < total then
        li:add_proto_expert_info(ex.truncated,
            string.format("payload length %d needs %d bytes, the datagram has %d", plen, total, tvb:reported_len()))
    elseif tvb:reported_len() > total then
        li:add_proto_expert_info(ex.trailing,
            string.format("%d bytes after 24 + payload length", tvb:reported_len() - total))
    end

    -- CRC (spec §3.2): the header's bytes 20-23, but shown at the header's end.
    local crc_range = tvb(20, 4)
    local stored = crc_range:uint()
    local ci = ht:add(f.crc, crc_range)
    if mf.prefs.check_crc and not partial then
        local calc = datagram_crc(tvb)
        if calc == stored then
            ci:append_text(" [correct]")
            ht:add(f.crc_status, 1):set_generated()
        else
            ci:append_text(string.format(" [incorrect, should be 0x%08x]", calc))
            ht:add(f.crc_calc, calc):set_generated()
            ht:add(f.crc_status, 0):set_generated()
            ci:add_proto_expert_info(ex.checksum, string.format("Bad CRC32C 0x%08x, should be 0x%08x", stored, calc))
        end
    else
        ht:add(f.crc_status, 2):set_generated()
    end

    if version ~= VERSION then
        vi:add_proto_expert_info(ex.version, "version " .. version .. " (only 1 exists)")
        return string.format("manyfold version %d (not decoded)", version)
    end
    if ptype > MAX_TYPE then
        ti:add_proto_expert_info(ex.ptype, "packet type " .. ptype .. " is reserved")
        return string.format("manyfold type %d (reserved)", ptype)
    end

    local info, role
    if ptype == 0 then
        info, role = dissect_segment(tvb, pinfo, tree, ht, flags, stop)
    elseif ptype == 10 then
        info, role = dissect_protected(tvb, pinfo, tree, ht, flags, stop)
    elseif ptype == 11 then
        info, role = dissect_sealed(tvb, pinfo, tree, ht, flags, stop)
    elseif ptype == 12 then
        info, role = dissect_path(tvb, pinfo, tree, ht, flags, stop)
    else
        info, role = dissect_mcast(tvb, pinfo, tree, ht, ptype, flags, stop)
    end
    ht:set_text(string.format("Header: %s, flags %s, payload %d bytes", packet_types[ptype], flag_names(flags), plen))
    tree:append_text(", " .. role)
    return info
end

local function dissect(tvb, pinfo, root)
    pinfo.cols.protocol = "manyfold"
    local parts = split_datagrams(tvb)
    if parts == nil or #parts == 1 then
        pinfo.cols.info = dissect_datagram(tvb, pinfo, root, root:add(mf, tvb()))
        return tvb:len()
    end
    local first, last
    for i, p in ipairs(parts) do
        local range = tvb(p[1], p[2])
        local tree = root:add(mf, range)
        tree:append_text(string.format(" (datagram %d of %d)", i, #parts))
        if i == 1 then
            tree:add_proto_expert_info(ex.batch, string.format(
                "%d datagrams of %d bytes in one captured packet: a UDP GSO send, captured before segmentation",
                #parts, p[2]))
        end
        local info = dissect_datagram(range:tvb(), pinfo, root, tree)
        first = first or info
        last = info
    end
    pinfo.cols.info = string.format("%d datagrams (GSO): %s ... %s", #parts, first, last)
    return tvb:len()
end

-- Any Lua error becomes an expert error on the packet instead of an
-- exception: the packet is then reported, not silently half-decoded.
local function dissect_safely(tvb, pinfo, root)
    local ok, result = pcall(dissect, tvb, pinfo, root)
    if not ok then
        root:add(mf, tvb()):add_proto_expert_info(ex.lua, "manyfold.lua: " .. tostring(result))
        return tvb:len()
    end
    return result
end
mf.dissector = dissect_safely

local function heuristic(tvb, pinfo, root)
    if not mf.prefs.heuristic or not looks_like_manyfold(tvb) then
        return false
    end
    -- The local function, not mf.dissector: reading that gives the
    -- registered handle, and calling a handle adds the layer twice.
    dissect_safely(tvb, pinfo, root)
    return true
end

mf:register_heuristic("udp", heuristic)

local udp_port = DissectorTable.get("udp.port")
local registered_ports = nil

function mf.prefs_changed()
    if registered_ports ~= nil then
        udp_port:remove(registered_ports, mf)
    end
    registered_ports = mf.prefs.ports
    if registered_ports ~= nil and registered_ports ~= "" then
        udp_port:add(registered_ports, mf)
    end
end

udp_port:add(DEFAULT_PORTS, mf)
registered_ports = DEFAULT_PORTS
pcall(function()
    udp_port:add_for_decode_as(mf)
end)
