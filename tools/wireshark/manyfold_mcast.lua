-- manyfold_mcast.lua: the multicast half of the manyfold dissector
-- (manyfold.lua, which loads this file from its own directory).
--
-- Owns the multicast session's fields and decoding (spec §16.2, §16.9,
-- §16.12; crates/manyfold-proto/src/wire/mcast.rs): ANNOUNCE, REGISTER,
-- REGISTER+ACK, GROUP (REGISTER+ACK with KLV), DATA, ACK, NACK, REPAIR,
-- STATUS with its loss-signature trailer, END, PARITY; and the protected
-- session's clear key exchange and sealed packets (spec §19.7).
--
-- manyfold.lua calls this chunk with a table of what the two halves
-- share (the field table, the expert items and the helpers) and gets
-- back dissect_mcast and dissect_sealed. Wireshark also runs every .lua
-- file of a plugins folder on its own: called without that table, this
-- chunk returns at once and registers nothing.

local m = ...
if type(m) ~= "table" or m.part_of ~= "manyfold" then
    return nil
end

local f, field, ex = m.f, m.field, m.ex
local bad, has, flag_names, band = m.bad, m.has, m.flag_names, m.band
local HEADER_LEN, PN_LEN, TAG_LEN = m.HEADER_LEN, m.PN_LEN, m.TAG_LEN
local F_ACK, F_FIN, F_KLV, F_ERR, F_CKE = m.F_ACK, m.F_FIN, m.F_KLV, m.F_ERR, m.F_CKE
local packet_types, error_codes = m.packet_types, m.error_codes

-- Constants (crates/manyfold-proto/src/wire/mcast.rs)
local ANNOUNCE_FIXED = 8 + 2 + 4 + 2 + 2 + 1 + 32 + 1
local UNKNOWN_TOTAL = 4294967295
local SEAL_HEAD = 4 + 8 -- sealed multicast packet: source, packet number (spec §19.7)
local patterns = { [1] = "IK", [2] = "IKpsk1", [3] = "NNpsk0" }
local phases = { [0] = "data", [1] = "repair", [2] = "ended" }
local hash_algos = { [1] = "BLAKE3" }

---------------------------------------------------------------------------
-- Fields
---------------------------------------------------------------------------

-- Multicast session (spec §16.2, §16.9): the header's fields by meaning.
field("mc_session", ProtoField.uint32("manyfold.mc.session", "Session id", base.HEX))
field("mc_next_sn", ProtoField.uint32("manyfold.mc.next_sn", "Next SN to send", base.DEC))
field("mc_total", ProtoField.uint32("manyfold.mc.total", "Total packets", base.DEC))
field("mc_phase", ProtoField.uint32("manyfold.mc.phase", "Phase", base.DEC, phases))
field("mc_network", ProtoField.uint32("manyfold.mc.network", "Network id", base.HEX))
field("mc_client", ProtoField.uint32("manyfold.mc.client", "Client id", base.HEX))
field("mc_from_sn", ProtoField.uint32("manyfold.mc.from_sn", "Receives from SN", base.DEC))
field("mc_sn", ProtoField.uint32("manyfold.mc.sn", "SN", base.DEC))
field("mc_lwsn", ProtoField.uint32("manyfold.mc.lwsn", "Last SN of the window (LWSN)", base.DEC))
field("mc_window", ProtoField.uint32("manyfold.mc.window", "Window (packets)", base.DEC))
field("mc_highest", ProtoField.uint32("manyfold.mc.highest", "Highest SN held", base.DEC))
field("mc_round", ProtoField.uint32("manyfold.mc.round", "Request round", base.DEC))
field("mc_held", ProtoField.uint32("manyfold.mc.held", "Packets held", base.DEC))
field("mc_zero", ProtoField.uint32("manyfold.mc.unused", "Unused", base.DEC))
field("mc_block", ProtoField.uint32("manyfold.mc.block", "FEC block", base.DEC))
field("mc_index", ProtoField.uint32("manyfold.mc.index", "Parity index", base.DEC))
field("mc_k", ProtoField.uint32("manyfold.mc.k", "Packets in the block", base.DEC))
field("mc_last", ProtoField.bool("manyfold.mc.last", "Last packet of the file"))
field("mc_repair", ProtoField.bool("manyfold.mc.repair", "Repair"))
field("mc_complete", ProtoField.bool("manyfold.mc.complete", "Complete and verified"))
field("mc_confirm", ProtoField.bool("manyfold.mc.confirm", "Sender's confirmation"))
field("mc_data", ProtoField.bytes("manyfold.mc.data", "File data"))
field("mc_shard", ProtoField.bytes("manyfold.mc.shard", "Parity shard"))
field("mc_trailing", ProtoField.bytes("manyfold.mc.trailing", "Bytes after the range list"))
-- spec §16.7, §16.12: the grouping fields (wire/mcast.rs)
field("mc_auto_group", ProtoField.bool("manyfold.mc.auto_group", "May be regrouped (no operator's network id)"))
field("mc_behind", ProtoField.bool("manyfold.mc.behind", "Behind its network"))
field("mc_epoch", ProtoField.uint32("manyfold.mc.epoch", "Group assignment epoch", base.DEC))
field("mc_group", ProtoField.uint32("manyfold.mc.group", "Group id", base.HEX))
field("mc_sigs", ProtoField.bytes("manyfold.mc.signatures", "Loss signatures"))
field("mc_sig_version", ProtoField.uint8("manyfold.mc.signatures.version", "Trailer version", base.DEC))
field("mc_sig_count", ProtoField.uint8("manyfold.mc.signatures.count", "Signatures", base.DEC))
field("mc_sig", ProtoField.bytes("manyfold.mc.signature", "Signature"))
field("mc_sig_block", ProtoField.uint32("manyfold.mc.signature.block", "Signature block (2048 SNs)", base.DEC))
field("mc_sig_bits", ProtoField.bytes("manyfold.mc.signature.bits", "Loss bits (256)"))
field("mc_sig_losses", ProtoField.uint32("manyfold.mc.signature.losses", "Bits set", base.DEC))
-- ANNOUNCE payload (mcast/wire.rs parse_announcement)
field("mc_info", ProtoField.bytes("manyfold.mc.info", "Session description"))
field("mc_size", ProtoField.uint64("manyfold.mc.size", "File size", base.DEC))
field("mc_block_size", ProtoField.uint16("manyfold.mc.block_size", "Block size", base.DEC))
field("mc_artp_max", ProtoField.uint32("manyfold.mc.artp_max", "ARTP max (us)", base.DEC))
field("mc_repair_interval", ProtoField.uint16("manyfold.mc.repair_interval", "Repair interval (ms)", base.DEC))
field("mc_fec_k", ProtoField.uint16("manyfold.mc.fec_k", "FEC packets per block", base.DEC))
field("mc_hash_algo", ProtoField.uint8("manyfold.mc.hash_algo", "Hash algorithm", base.DEC, hash_algos))
field("mc_hash", ProtoField.bytes("manyfold.mc.hash", "Hash"))
field("mc_name_len", ProtoField.uint8("manyfold.mc.name_len", "Name length", base.DEC))
field("mc_name", ProtoField.string("manyfold.mc.name", "Name"))

-- Protected multicast sessions (spec §19.7)
field("mc_pattern", ProtoField.uint8("manyfold.mc.pattern", "Noise pattern", base.DEC, patterns))
field("mc_sender_key", ProtoField.bytes("manyfold.mc.sender_key", "Sender's static public key"))
field("mc_noise", ProtoField.bytes("manyfold.mc.noise", "Noise handshake message"))
field("mc_source", ProtoField.uint32("manyfold.mc.source", "Source (0: the sender)", base.DEC))
field("mc_seq", ProtoField.uint32("manyfold.mc.seq", "Sequence field (SN, LWSN, held, ... by the inner type)", base.DEC))
field("mc_ack", ProtoField.uint32("manyfold.mc.ack", "Acknowledgement field (by the inner type)", base.DEC))
field("mc_win", ProtoField.uint32("manyfold.mc.win", "Window field (window, client, ... by the inner type)", base.DEC))

-- Range lists (spec §16.2)
field("mc_ranges", ProtoField.bytes("manyfold.mc.ranges", "Missing SNs"))
field("mc_range_count", ProtoField.uint16("manyfold.mc.ranges.count", "Ranges", base.DEC))
field("mc_range_start", ProtoField.uint32("manyfold.mc.range.start", "Start", base.DEC))
field("mc_range_end", ProtoField.uint32("manyfold.mc.range.end", "End", base.DEC))
field("mc_missing", ProtoField.uint32("manyfold.mc.missing", "SNs missing", base.DEC))

---------------------------------------------------------------------------
-- Multicast session (spec §16.2, §16.9; mcast/wire.rs)
---------------------------------------------------------------------------

local function dissect_ranges(tvb, tree, at, stop)
    if stop - at < 2 then
        bad(tree, nil, "range list needs a 2-byte count")
        return nil
    end
    local n = tvb(at, 2):uint()
    if stop - at < 2 + 8 * n then
        local rt = tree:add(f.mc_ranges, tvb(at, stop - at))
        rt:add(f.mc_range_count, tvb(at, 2))
        bad(rt, nil, string.format("range list of %d ranges runs past the payload", n))
        return nil
    end
    local rt = tree:add(f.mc_ranges, tvb(at, 2 + 8 * n))
    rt:add(f.mc_range_count, tvb(at, 2))
    local missing, prev_end, texts, ok = 0, nil, {}, true
    for i = 0, n - 1 do
        local o = at + 2 + 8 * i
        local s, e = tvb(o, 4):uint(), tvb(o + 4, 4):uint()
        rt:add(f.mc_range_start, tvb(o, 4))
        rt:add(f.mc_range_end, tvb(o + 4, 4))
        if s >= e or (prev_end ~= nil and s < prev_end) then
            ok = false
        else
            missing = missing + (e - s)
        end
        prev_end = e
        if #texts < 8 then
            texts[#texts + 1] = string.format("%u-%u", s, e)
        elseif #texts == 8 then
            texts[#texts + 1] = "..."
        end
    end
    rt:set_text(string.format("Missing SNs: %d range%s%s", n, n == 1 and "" or "s",
        n > 0 and (": " .. table.concat(texts, ", ")) or ""))
    if not ok then
        bad(rt, nil, "ranges empty, descending or overlapping")
        return nil
    end
    rt:add(f.mc_missing, missing):set_generated()
    local after = at + 2 + 8 * n
    if after < stop then
        -- mcast/wire.rs ignores what follows the list.
        local t = tree:add(f.mc_trailing, tvb(after, stop - after))
        t:add_proto_expert_info(ex.note, "bytes after the range list (ignored by the receiver)")
    end
    local text = n > 0 and (" missing=" .. table.concat(texts, ",")) or ""
    return text
end

local MAX_SIGNATURES = 4
local SIGNATURE_LEN = 36

local function popcount32(x)
    local n = 0
    while x ~= 0 do
        x = band(x, x - 1)
        n = n + 1
    end
    return n
end

-- A STATUS's loss-signature trailer (spec §16.12, wire/mcast.rs
-- Signatures::parse): version 1, a count of 1 to 4, 36-byte entries.
-- Returns the Info text, or nil when malformed.
local function dissect_signatures(tvb, tree, at, stop)
    if at >= stop then
        return ""
    end
    local version = tvb(at, 1):uint()
    if version ~= 1 then
        local t = tree:add(f.mc_sigs, tvb(at, stop - at))
        t:set_text(string.format("Loss signatures of version %d (ignored by the sender)", version))
        t:add(f.mc_sig_version, tvb(at, 1))
        t:add_proto_expert_info(ex.note, "a trailer of another version: ignored, the STATUS stands")
        return " signatures=v" .. version
    end
    if stop - at < 2 then
        local t = tree:add(f.mc_sigs, tvb(at, stop - at))
        bad(t, nil, "loss-signature trailer without its count")
        return nil
    end
    local n = tvb(at + 1, 1):uint()
    if n == 0 or n > MAX_SIGNATURES then
        local t = tree:add(f.mc_sigs, tvb(at, stop - at))
        t:add(f.mc_sig_version, tvb(at, 1))
        t:add(f.mc_sig_count, tvb(at + 1, 1))
        bad(t, nil, string.format("%d signatures (1 to %d)", n, MAX_SIGNATURES))
        return nil
    end
    local len = 2 + SIGNATURE_LEN * n
    if stop - at < len then
        local t = tree:add(f.mc_sigs, tvb(at, stop - at))
        t:add(f.mc_sig_version, tvb(at, 1))
        t:add(f.mc_sig_count, tvb(at + 1, 1))
        bad(t, nil, string.format("%d signatures run past the payload", n))
        return nil
    end
    local t = tree:add(f.mc_sigs, tvb(at, len))
    t:add(f.mc_sig_version, tvb(at, 1))
    t:add(f.mc_sig_count, tvb(at + 1, 1))
    local texts = {}
    for i = 0, n - 1 do
        local o = at + 2 + SIGNATURE_LEN * i
        local block = tvb(o, 4):uint()
        local ones = 0
        for w = 0, 7 do
            ones = ones + popcount32(tvb(o + 4 + 4 * w, 4):uint())
        end
        local e = t:add(f.mc_sig, tvb(o, SIGNATURE_LEN))
        e:set_text(string.format("Signature of block %u (SNs %u-%u): %d bits set", block, block * 2048,
            block * 2048 + 2047, ones))
        e:add(f.mc_sig_block, tvb(o, 4))
        e:add(f.mc_sig_bits, tvb(o + 4, 32))
        e:add(f.mc_sig_losses, ones):set_generated()
        texts[#texts + 1] = string.format("%u:%d", block, ones)
    end
    t:set_text(string.format("Loss signatures: %d block%s", n, n == 1 and "" or "s"))
    if at + len < stop then
        local x = tree:add(f.mc_trailing, tvb(at + len, stop - at - len))
        x:add_proto_expert_info(ex.note, "bytes after the loss signatures (ignored by the sender)")
    end
    return " signatures=" .. table.concat(texts, ",")
end

-- An ANNOUNCE payload (also REGISTER+ACK's); returns the file name or nil.
local function dissect_announcement(tvb, tree, at, stop)
    local left = stop - at
    if left < ANNOUNCE_FIXED then
        bad(tree, nil, string.format("session description needs %d bytes, %d left", ANNOUNCE_FIXED, left))
        return nil
    end
    local name_len = tvb(at + 51, 1):uint()
    local it = tree:add(f.mc_info, tvb(at, left))
    local size_hi, size_lo = tvb(at, 4):uint(), tvb(at + 4, 4):uint()
    local si = it:add(f.mc_size, tvb(at, 8))
    if size_hi == 0xffffffff and size_lo == 0xffffffff then
        si:append_text(" (unknown)")
    end
    local block = tvb(at + 8, 2):uint()
    it:add(f.mc_block_size, tvb(at + 8, 2))
    it:add(f.mc_artp_max, tvb(at + 10, 4))
    it:add(f.mc_repair_interval, tvb(at + 14, 2))
    it:add(f.mc_fec_k, tvb(at + 16, 2))
    local algo = tvb(at + 18, 1):uint()
    it:add(f.mc_hash_algo, tvb(at + 18, 1))
    local hi = it:add(f.mc_hash, tvb(at + 19, 32))
    if tvb(at + 19, 32):bytes():tohex() == string.rep("00", 32) then
        hi:append_text(" (unknown)")
    end
    it:add(f.mc_name_len, tvb(at + 51, 1))
    local ok = true
    if block == 0 then
        bad(it, nil, "block size 0")
        ok = false
    end
    if algo ~= 1 then
        bad(it, nil, "hash algorithm " .. algo .. " (only 1, BLAKE3)")
        ok = false
    end
    if left < ANNOUNCE_FIXED + name_len then
        bad(it, nil, string.format("name of %d bytes runs past the payload", name_len))
        return nil
    end
    local name = ""
    if name_len > 0 then
        name = tvb(at + ANNOUNCE_FIXED, name_len):raw()
        it:add(f.mc_name, tvb(at + ANNOUNCE_FIXED, name_len), name)
    end
    if string.find(name, "/", 1, true) then
        bad(it, nil, "name contains '/'")
        ok = false
    end
    if left ~= ANNOUNCE_FIXED + name_len then
        bad(it, nil, string.format("%d bytes after the name", left - ANNOUNCE_FIXED - name_len))
        ok = false
    end
    -- (mcast/wire.rs also rejects a name that is not UTF-8.)
    it:set_text(string.format("Session description: %q, block %d", name, block))
    if not ok then
        return nil
    end
    return name
end

-- A sealed multicast packet (spec §19.7): the header in the clear and
-- authenticated (the inner packet's flags and fields, type 11); the
-- source and packet number; the encrypted inner type and payload; the tag.
local function dissect_sealed(tvb, pinfo, tree, ht, flags, stop)
    local session = tvb(4, 4):uint()
    ht:add(f.mc_session, tvb(4, 4))
    ht:add(f.mc_seq, tvb(8, 4))
    ht:add(f.mc_ack, tvb(12, 4))
    ht:add(f.mc_win, tvb(16, 4))
    local role = "SEALED"
    tree:add(f.packet, role):set_generated()
    local head = string.format("%s [%s] session=%08x seq=%u", role, flag_names(flags), session, tvb(8, 4):uint())
    local plen = stop - HEADER_LEN
    if plen < SEAL_HEAD + 1 + TAG_LEN then
        local pt = tree:add(tvb(HEADER_LEN, plen), "Sealed payload, truncated")
        bad(pt, nil, string.format("a sealed packet needs %d bytes after the header (source, packet number, inner "
            .. "type and tag), has %d", SEAL_HEAD + 1 + TAG_LEN, plen))
        return head .. " malformed", role
    end
    local source = tvb(HEADER_LEN, 4):uint()
    tree:add(f.mc_source, tvb(HEADER_LEN, 4))
    local pn = tostring(tvb(HEADER_LEN + 4, PN_LEN):uint64())
    tree:add(f.pn, tvb(HEADER_LEN + 4, PN_LEN))
    local elen = plen - SEAL_HEAD - TAG_LEN
    local et = tree:add(f.encrypted, tvb(HEADER_LEN + SEAL_HEAD, elen))
    et:set_text(string.format("Encrypted (%d bytes): the inner packet type and payload", elen))
    tree:add(f.encrypted_len, elen):set_generated()
    tree:add(f.tag, tvb(stop - TAG_LEN, TAG_LEN))
    if session == 0 then
        bad(tree, nil, "session id 0")
    end
    local who = source == 0 and "sender" or ("source " .. source)
    return string.format("%s from %s pn=%s encrypted=%d", head, who, pn, elen), role
end

-- The clear key exchange of a protected session (CKE set, spec §19.7):
-- the invitation (ANNOUNCE), REGISTER with Noise message 1, REGISTER+ACK
-- with message 2. Returns the packet's name and the Info text.
local function dissect_key_exchange(tvb, tree, ht, ptype, flags, at, stop)
    local window, ackn = tvb(16, 4):uint(), tvb(12, 4):uint()
    local payload = stop - at
    if ptype == 1 then
        if payload ~= 33 then
            bad(tree, nil, string.format("an invitation carries 33 bytes (pattern, key), not %d", payload))
            return "INVITE", " malformed"
        end
        local pattern = tvb(at, 1):uint()
        local pi = tree:add(f.mc_pattern, tvb(at, 1))
        if patterns[pattern] == nil then
            bad(pi, nil, "pattern " .. pattern .. " (1 IK, 2 IKpsk1, 3 NNpsk0)")
        end
        tree:add(f.mc_sender_key, tvb(at + 1, 32))
        return "INVITE", string.format(" pattern=%s key=%s...", patterns[pattern] or tostring(pattern),
            tvb(at + 1, 4):bytes():tohex():lower())
    end
    ht:add(f.mc_network, tvb(12, 4))
    ht:add(f.mc_client, tvb(16, 4))
    local name = has(flags, F_ACK) and "REGISTER+ACK+CKE" or "REGISTER+CKE"
    if payload == 0 then
        bad(tree, nil, "no Noise message")
        return name, " malformed"
    end
    local nt = tree:add(f.mc_noise, tvb(at, payload))
    nt:set_text(string.format("Noise message %d (%d bytes)%s", has(flags, F_ACK) and 2 or 1, payload,
        has(flags, F_ACK) and ": its encrypted payload grants the group key" or ""))
    return name, string.format(" client=%08x network=%06x noise=%d", window, ackn, payload)
end

local function dissect_mcast(tvb, pinfo, tree, ht, ptype, flags, stop)
    local session = tvb(4, 4):uint()
    local seq, ackn, window = tvb(8, 4):uint(), tvb(12, 4):uint(), tvb(16, 4):uint()
    local r_session, r_seq, r_ack, r_win = tvb(4, 4), tvb(8, 4), tvb(12, 4), tvb(16, 4)
    ht:add(f.mc_session, r_session)
    if session == 0 then
        bad(tree, nil, "session id 0")
    end
    local at = HEADER_LEN
    local error_code = nil
    if has(flags, F_ERR) then
        if stop - at < 2 then
            bad(tree, nil, "ERR set but no room for the error code")
            return string.format("%s [%s] malformed", packet_types[ptype], flag_names(flags)), packet_types[ptype]
        end
        error_code = tvb(at, 2):uint()
        tree:add(f.error, tvb(at, 2))
        at = at + 2
    end
    local name = packet_types[ptype]
    local info = ""
    local payload = stop - at
    if has(flags, F_CKE) and (ptype == 1 or ptype == 2) then
        name, info = dissect_key_exchange(tvb, tree, ht, ptype, flags, at, stop)
    elseif ptype == 1 then
        ht:add(f.mc_next_sn, r_seq)
        local ti = ht:add(f.mc_total, r_ack)
        if ackn == UNKNOWN_TOTAL then
            ti:append_text(" (unknown)")
        end
        local pi = ht:add(f.mc_phase, r_win)
        if phases[window] == nil then
            bad(pi, nil, "phase " .. window .. " (0 data, 1 repair, 2 ended)")
        end
        local fname = dissect_announcement(tvb, tree, at, stop)
        info = string.format(" next_sn=%u total=%s phase=%s name=%q", seq,
            ackn == UNKNOWN_TOTAL and "unknown" or tostring(ackn), phases[window] or tostring(window), fname or "?")
    elseif ptype == 2 and has(flags, F_ACK) and has(flags, F_KLV) then
        -- spec §16.12: the group the sender assigns (wire/mcast.rs GroupAssignment).
        name = "GROUP"
        ht:add(f.mc_epoch, r_seq)
        ht:add(f.mc_group, r_ack)
        ht:add(f.mc_client, r_win)
        info = string.format(" client=%08x group=%08x epoch=%u", window, ackn, seq)
        if payload > 0 then
            bad(tree:add(tvb(at, payload), "Payload"), nil, "a group assignment carries no payload")
            info = info .. " malformed"
        end
    elseif ptype == 2 then
        ht:add(f.mc_network, r_ack)
        ht:add(f.mc_client, r_win)
        if has(flags, F_ACK) then
            name = "REGISTER+ACK"
            ht:add(f.mc_from_sn, r_seq)
            info = string.format(" client=%08x network=%06x from_sn=%u", window, ackn, seq)
            if payload > 0 then
                local fname = dissect_announcement(tvb, tree, at, stop)
                info = info .. string.format(" name=%q", fname or "?")
            end
        else
            ht:add(f.mc_zero, r_seq)
            tree:add(f.mc_auto_group, has(flags, F_KLV)):set_generated()
            info = string.format(" client=%08x network=%06x%s", window, ackn, has(flags, F_KLV) and " auto-group" or "")
        end
    elseif ptype == 3 then
        ht:add(f.mc_sn, r_seq)
        ht:add(f.mc_lwsn, r_ack)
        ht:add(f.mc_window, r_win)
        tree:add(f.mc_last, has(flags, F_FIN)):set_generated()
        tree:add(f.mc_repair, has(flags, F_KLV)):set_generated()
        if payload > 0 then
            tree:add(f.mc_data, tvb(at, payload))
        end
        info = string.format(" sn=%u lwsn=%u w=%u %d bytes%s%s", seq, ackn, window, payload,
            has(flags, F_KLV) and " repair" or "", has(flags, F_FIN) and " last" or "")
    elseif ptype >= 4 and ptype <= 6 then
        local first = ({ [4] = f.mc_lwsn, [5] = f.mc_highest, [6] = f.mc_round })[ptype]
        local label = ({ [4] = "lwsn", [5] = "highest", [6] = "round" })[ptype]
        ht:add(first, r_seq)
        ht:add(f.mc_network, r_ack)
        ht:add(f.mc_client, r_win)
        if ptype == 4 then
            tree:add(f.mc_behind, has(flags, F_KLV)):set_generated()
        end
        local text = dissect_ranges(tvb, tree, at, stop)
        info = string.format(" client=%08x %s=%u%s%s", window, label, seq, text or " malformed ranges",
            (ptype == 4 and has(flags, F_KLV)) and " behind" or "")
    elseif ptype == 7 then
        if has(flags, F_ACK) then
            name = "STATUS+ACK"
        end
        ht:add(f.mc_held, r_seq)
        ht:add(f.mc_network, r_ack)
        ht:add(f.mc_client, r_win)
        tree:add(f.mc_complete, has(flags, F_FIN)):set_generated()
        tree:add(f.mc_confirm, has(flags, F_ACK)):set_generated()
        info = string.format(" client=%08x held=%u%s", window, seq, has(flags, F_FIN) and " complete" or "")
        -- spec §16.12: the loss-signature trailer, after the code if any.
        local text = dissect_signatures(tvb, tree, at, stop)
        info = info .. (text or " malformed signatures")
    elseif ptype == 8 then
        ht:add(f.mc_total, r_seq)
        ht:add(f.mc_zero, r_ack)
        local ci = ht:add(f.mc_client, r_win)
        if window == 0 then
            ci:append_text(" (every receiver)")
        end
        info = string.format(" total=%u client=%s", seq, window == 0 and "all" or string.format("%08x", window))
        if payload > 0 then
            tree:add(tvb(at, payload), "Unused payload")
        end
    elseif ptype == 9 then
        ht:add(f.mc_block, r_seq)
        local ii = ht:add(f.mc_index, r_ack)
        local ki = ht:add(f.mc_k, r_win)
        if ackn > 65535 then
            bad(ii, nil, "parity index above 65535")
        end
        if window == 0 or window > 65535 then
            bad(ki, nil, "block packet count must be 1 to 65535")
        end
        if payload == 0 then
            bad(tree, nil, "empty parity shard")
        else
            tree:add(f.mc_shard, tvb(at, payload))
        end
        info = string.format(" block=%u index=%u k=%u %d bytes", seq, ackn, window, payload)
    end
    tree:add(f.packet, name):set_generated()
    if error_code then
        info = info .. " error=" .. (error_codes[error_code] or tostring(error_code))
    end
    return string.format("%s [%s] session=%08x%s", name, flag_names(flags), session, info), name
end

return { dissect_mcast = dissect_mcast, dissect_sealed = dissect_sealed }
