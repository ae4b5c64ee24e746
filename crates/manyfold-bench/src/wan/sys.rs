//! The `wan` scenario's system calls that std does not wrap: opening a TUN
//! device (`TUNSETIFF`, Linux `Documentation/networking/tuntap.rst`),
//! waiting on a descriptor with a sub-millisecond timeout (`ppoll(2)`),
//! an async-signal-safe interrupt flag for Ctrl-C / SIGTERM cleanup, and
//! the host's monotonic clock as a number (the `messages` scenario's
//! stamps).
//!
//! The scenario's only unsafe code lives here, each block with its reason.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// `_IOW('T', 202, int)` from <linux/if_tun.h>; the libc crate does not
/// export it on every target.
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;
const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;

/// `struct ifreq` as TUNSETIFF reads it: the name, then the flags in the
/// union; padded to the kernel's 40 bytes.
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// Creates (or attaches to) the layer-3 TUN device `name` without packet
/// information headers; the descriptor is non-blocking. The device lives
/// as long as the returned file.
pub fn open_tun(name: &str) -> io::Result<File> {
    if name.len() >= libc::IFNAMSIZ || name.is_empty() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"));
    }
    let file = OpenOptions::new().read(true).write(true).custom_flags(libc::O_NONBLOCK).open("/dev/net/tun")?;
    let mut req = IfReq { name: [0; libc::IFNAMSIZ], flags: IFF_TUN | IFF_NO_PI, _pad: [0; 22] };
    req.name[..name.len()].copy_from_slice(name.as_bytes());
    // SAFETY: `file` is an open /dev/net/tun descriptor and `req` is a live,
    // properly laid out `struct ifreq` that TUNSETIFF reads and may write
    // (the chosen name) for the duration of the call only.
    let r = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF as _, &mut req as *mut IfReq) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(file)
}

/// Waits until `file` is readable or `timeout` passes; true if readable.
pub fn wait_readable(file: &File, timeout: Duration) -> io::Result<bool> {
    let mut pfd = libc::pollfd { fd: file.as_raw_fd(), events: libc::POLLIN, revents: 0 };
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as _ };
    // SAFETY: one valid pollfd and a timespec, both live locals; no signal
    // mask is passed (null), which ppoll allows.
    let r = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(false);
        }
        return Err(e);
    }
    Ok(r > 0)
}

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_sig: libc::c_int) {
    // Only an atomic store: async-signal-safe.
    INTERRUPTED.store(true, Ordering::SeqCst);
}

/// Routes SIGINT, SIGTERM and SIGHUP to a flag that `interrupted` reads, so
/// that a watcher thread can delete the namespaces before exiting.
pub fn install_interrupt_flag() {
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        // SAFETY: `on_signal` is an `extern "C" fn(c_int)` that only stores
        // to an atomic, which is async-signal-safe.
        unsafe {
            libc::signal(sig, on_signal as extern "C" fn(libc::c_int) as libc::sighandler_t);
        }
    }
}

pub fn interrupted() -> bool {
    INTERRUPTED.load(Ordering::SeqCst)
}

/// Sends SIGKILL to `pid` (errors ignored: it may be gone already).
pub fn kill(pid: u32) {
    // SAFETY: kill(2) takes plain integers; a stale pid at worst fails.
    unsafe {
        libc::kill(pid as libc::pid_t, libc::SIGKILL);
    }
}

/// Puts the calling thread in the `SCHED_FIFO` class at `priority`
/// (sched(7)): it then runs as soon as it is runnable, ahead of every
/// ordinary process. The relay's packet threads ask for it because on a
/// shared 2-core machine an ordinary thread waits milliseconds for a core,
/// and the packets that pile up in the TUN ring meanwhile reach the
/// emulated queue as one burst and overflow it: the emulator, not the
/// link, would drop them. The threads block whenever they have nothing to
/// do, and the kernel's RT throttling (`sched_rt_runtime_us`) keeps a share
/// of every second for other tasks in any case.
pub fn set_realtime(priority: i32) -> io::Result<()> {
    let param = libc::sched_param { sched_priority: priority };
    // SAFETY: pid 0 is the calling thread; `param` is a live local the
    // kernel only reads.
    let r = unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// User plus system CPU time of process `pid` (all its threads) and its
/// peak resident set in KiB, from `/proc/PID/stat` and `/proc/PID/status`
/// (proc(5)): the cost of a process this program did not `wait4` for, such
/// as the relay or a tunnel that is killed at the end.
pub fn proc_usage(pid: u32) -> io::Result<(Duration, u64)> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces; fields after its ')' are
    // plain: state is field 3, utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).ok_or_else(|| io::Error::other("bad /proc stat line"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| -> io::Result<u64> {
        fields.get(i).and_then(|v| v.parse().ok()).ok_or_else(|| io::Error::other("bad /proc stat field"))
    };
    let total = ticks(11)? + ticks(12)?;
    // SAFETY: sysconf takes a plain integer and returns one.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let cpu = Duration::from_secs_f64(total as f64 / hz as f64);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))?;
    let hwm = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0);
    Ok((cpu, hwm))
}

/// CLOCK_MONOTONIC in nanoseconds (clock_gettime(2)): one clock for every
/// process of the host, whatever its namespace, so a time one process
/// stamps into a message another can subtract from its own reading.
pub fn monotonic_ns() -> u64 {
    let mut t = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: `t` is a live local the kernel writes; CLOCK_MONOTONIC always
    // exists on Linux, so the call cannot fail.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Whether this process runs as root (the namespaces need it).
pub fn is_root() -> bool {
    // SAFETY: geteuid(2) takes nothing and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Sets the socket's congestion control (`TCP_CONGESTION`, tcp(7)) and
/// reads it back, so a row is never silently run with the default.
pub fn set_tcp_congestion(sock: &std::net::TcpStream, name: &str) -> io::Result<()> {
    let fd = sock.as_raw_fd();
    // SAFETY: the option value is `name`'s bytes, valid for their length
    // during the call; the kernel copies them.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buf = [0u8; 16];
    let mut len = buf.len() as libc::socklen_t;
    // SAFETY: `buf` and `len` are live locals; the kernel writes at most
    // `len` bytes and stores the length written.
    let r = unsafe { libc::getsockopt(fd, libc::IPPROTO_TCP, libc::TCP_CONGESTION, buf.as_mut_ptr().cast(), &mut len) };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    let got = buf[..len as usize].split(|b| *b == 0).next().unwrap_or(&[]);
    if got != name.as_bytes() {
        return Err(io::Error::other(format!("TCP_CONGESTION is {:?}, not {name}", String::from_utf8_lossy(got))));
    }
    Ok(())
}

/// Grows a UDP socket's receive buffer past `rmem_max` (SO_RCVBUFFORCE;
/// root), so the self-check's receiver does not drop what the relay
/// delivered while it waits for a core.
pub fn force_rcvbuf(sock: &std::net::UdpSocket, bytes: usize) -> io::Result<()> {
    let v = bytes as libc::c_int;
    // SAFETY: the option value is a live c_int, passed with its size.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}
