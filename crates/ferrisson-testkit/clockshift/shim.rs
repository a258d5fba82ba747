//! An `LD_PRELOAD` library that moves a process's wall clock, and nothing else.
//!
//! `clock_gettime(CLOCK_REALTIME*)`, `gettimeofday` and `time` return the real time plus
//! an offset in nanoseconds read from the first 8 bytes (native-endian `i64`) of the
//! file named by `FERRISSON_CLOCKSHIFT_FILE`. The file is mapped once, so a test moves
//! the clock of a running process by rewriting those bytes. Monotonic and CPU clocks are
//! passed through untouched: that is the point of the experiments it serves.
//!
//! Built by the testkit's build script (`build.rs`) as a `no_std` cdylib with no
//! dependencies: it must not allocate (the host's allocator may read the clock while
//! initialising, and would re-enter us) and must load into any process, `redis-server`
//! included. libfaketime does the same job but aborts inside `redis-server` 7.0
//! ("unexpected recursive calls to clock_gettime()" through jemalloc).

#![no_std]

use core::ffi::{c_char, c_int, c_long, c_void};
use core::sync::atomic::{AtomicI64, AtomicPtr, AtomicU8, Ordering};

#[repr(C)]
pub struct Timespec {
    tv_sec: i64,
    tv_nsec: c_long,
}

#[repr(C)]
pub struct Timeval {
    tv_sec: i64,
    tv_usec: i64,
}

const CLOCK_REALTIME: c_int = 0;
const CLOCK_REALTIME_COARSE: c_int = 5;
const O_RDONLY: c_int = 0;
const PROT_READ: c_int = 1;
const MAP_SHARED: c_int = 1;
const MAP_FAILED: *mut c_void = !0 as *mut c_void;
const NANOS_PER_SEC: i64 = 1_000_000_000;

#[cfg(target_arch = "x86_64")]
const SYS_CLOCK_GETTIME: c_long = 228;
#[cfg(target_arch = "aarch64")]
const SYS_CLOCK_GETTIME: c_long = 113;

#[link(name = "c")]
unsafe extern "C" {
    fn syscall(number: c_long, ...) -> c_long;
    fn getenv(name: *const c_char) -> *mut c_char;
    fn open(path: *const c_char, flags: c_int, ...) -> c_int;
    fn close(fd: c_int) -> c_int;
    fn mmap(
        addr: *mut c_void,
        len: usize,
        prot: c_int,
        flags: c_int,
        fd: c_int,
        offset: i64,
    ) -> *mut c_void;
    fn abort() -> !;
}

const UNMAPPED: u8 = 0;
const MAPPING: u8 = 1;
const MAPPED: u8 = 2;

static STATE: AtomicU8 = AtomicU8::new(UNMAPPED);
static OFFSET: AtomicPtr<i64> = AtomicPtr::new(core::ptr::null_mut());

/// The current offset in nanoseconds; zero until the file is mapped, and while it is
/// being mapped (a clock read from inside `open`/`mmap`, or from another thread).
fn offset_nanos() -> i64 {
    if STATE.load(Ordering::Acquire) != MAPPED
        && STATE
            .compare_exchange(UNMAPPED, MAPPING, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    {
        // SAFETY: plain libc calls on a NUL-terminated name; a failure leaves the
        // pointer null and the clock unshifted.
        unsafe { map_offset_file() };
        STATE.store(MAPPED, Ordering::Release);
    }
    let ptr = OFFSET.load(Ordering::Acquire);
    if ptr.is_null() {
        return 0;
    }
    // SAFETY: `ptr` is the start of a page-aligned shared mapping of at least 8 bytes;
    // the writer stores whole aligned 8-byte values.
    unsafe { AtomicI64::from_ptr(ptr) }.load(Ordering::Relaxed)
}

unsafe fn map_offset_file() {
    let path = unsafe { getenv(c"FERRISSON_CLOCKSHIFT_FILE".as_ptr()) };
    if path.is_null() {
        return;
    }
    let fd = unsafe { open(path, O_RDONLY) };
    if fd < 0 {
        return;
    }
    let map = unsafe { mmap(core::ptr::null_mut(), 8, PROT_READ, MAP_SHARED, fd, 0) };
    unsafe { close(fd) };
    if map != MAP_FAILED {
        OFFSET.store(map.cast(), Ordering::Release);
    }
}

unsafe fn real_clock_gettime(clock: c_int, ts: *mut Timespec) -> c_int {
    // The raw system call, not the vDSO: there is no "next" symbol to look up without
    // dlsym, which may allocate.
    unsafe { syscall(SYS_CLOCK_GETTIME, c_long::from(clock), ts) as c_int }
}

fn shifted(ts: &mut Timespec) {
    let total = i128::from(ts.tv_sec) * i128::from(NANOS_PER_SEC)
        + i128::from(ts.tv_nsec)
        + i128::from(offset_nanos());
    ts.tv_sec = total.div_euclid(i128::from(NANOS_PER_SEC)) as i64;
    ts.tv_nsec = total.rem_euclid(i128::from(NANOS_PER_SEC)) as c_long;
}

/// # Safety
///
/// As the libc function: `ts` points to a writable `struct timespec`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn clock_gettime(clock: c_int, ts: *mut Timespec) -> c_int {
    let result = unsafe { real_clock_gettime(clock, ts) };
    if result == 0 && (clock == CLOCK_REALTIME || clock == CLOCK_REALTIME_COARSE) {
        if let Some(ts) = unsafe { ts.as_mut() } {
            shifted(ts);
        }
    }
    result
}

/// # Safety
///
/// As the libc function: `tv` is null or points to a writable `struct timeval`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn gettimeofday(tv: *mut Timeval, _tz: *mut c_void) -> c_int {
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    let result = unsafe { clock_gettime(CLOCK_REALTIME, &raw mut ts) };
    if result == 0 {
        if let Some(tv) = unsafe { tv.as_mut() } {
            tv.tv_sec = ts.tv_sec;
            tv.tv_usec = i64::from(ts.tv_nsec) / 1000;
        }
    }
    result
}

/// # Safety
///
/// As the libc function: `out` is null or points to a writable `time_t`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn time(out: *mut i64) -> i64 {
    let mut ts = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    if unsafe { clock_gettime(CLOCK_REALTIME, &raw mut ts) } != 0 {
        return -1;
    }
    if let Some(out) = unsafe { out.as_mut() } {
        *out = ts.tv_sec;
    }
    ts.tv_sec
}

#[panic_handler]
fn panic(_: &core::panic::PanicInfo<'_>) -> ! {
    // SAFETY: ends the process, as a C library would on a broken invariant.
    unsafe { abort() }
}

/// Never called (`-Cpanic=abort`), but the precompiled `core` still names it.
#[unsafe(no_mangle)]
pub extern "C" fn rust_eh_personality() {}
