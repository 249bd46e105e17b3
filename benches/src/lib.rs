//! What the benchmark programs in `src/bin/` share.
//!
//! - [`counting`]: the counting global allocator behind every
//!   "allocations per message" figure. Linking this crate installs it as
//!   the program's global allocator; it counts only while switched on.

/// Counts heap allocations while switched on.
///
/// ```text
/// counting::enable(true);
/// let before = counting::allocations();
/// // ... the code under measurement ...
/// let made = counting::allocations() - before;
/// counting::enable(false);
/// ```
pub mod counting {
    // The workspace forbids unsafe code; this crate only denies it, and this
    // module alone allows it, because a global allocator can only be written
    // as an `unsafe impl GlobalAlloc`. It forwards every call to the system
    // allocator unchanged and only bumps a counter.
    #![allow(unsafe_code)]

    use std::alloc::{GlobalAlloc, Layout, System};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    static ENABLED: AtomicBool = AtomicBool::new(false);
    static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);

    /// The system allocator, counting allocations and reallocations while
    /// [`enable`] is on. Off, it costs one relaxed load per call.
    struct CountingAllocator;

    #[global_allocator]
    static GLOBAL: CountingAllocator = CountingAllocator;

    fn count() {
        if ENABLED.load(Ordering::Relaxed) {
            ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        }
    }

    // SAFETY: every method forwards its arguments unchanged to `System`,
    // which upholds the `GlobalAlloc` contract; counting touches no memory
    // handed out by the allocator.
    unsafe impl GlobalAlloc for CountingAllocator {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: the caller's guarantees for `layout` are passed on.
            unsafe { System.alloc(layout) }
        }

        unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
            count();
            // SAFETY: as for `alloc`.
            unsafe { System.alloc_zeroed(layout) }
        }

        unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
            count();
            // SAFETY: `ptr` was allocated by `System` (every allocation
            // goes through this type) with `layout`, as the caller
            // guarantees.
            unsafe { System.realloc(ptr, layout, new_size) }
        }

        unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
            // SAFETY: as for `realloc`.
            unsafe { System.dealloc(ptr, layout) }
        }
    }

    /// Switches counting on or off. The switch is global: allocations on
    /// every thread are counted while it is on.
    pub fn enable(on: bool) {
        ENABLED.store(on, Ordering::Relaxed);
    }

    /// Allocations counted so far.
    pub fn allocations() -> u64 {
        ALLOCATIONS.load(Ordering::Relaxed)
    }
}
