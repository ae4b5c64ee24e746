//! Loss recovery: RTT estimation, the sent-packet record, loss detection (spec §5).
