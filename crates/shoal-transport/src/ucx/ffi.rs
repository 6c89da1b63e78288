//! A hand-checked binding of the few UCP functions and structs the ucx
//! transport uses, loaded at run time with `libloading`: shoal builds and
//! runs without UCX, and only `SHOAL_TRANSPORT=ucx` (or remote peers routed
//! to UCX) needs `libucp.so.0` (Debian/Ubuntu: `apt-get install libucx0`).
//!
//! Struct layouts, field-mask bits and constants were checked against the
//! headers of UCX 1.13.1 (`/usr/include/ucp/api/ucp.h`, `ucp_def.h`) with a
//! C program printing `sizeof`/`offsetof`; the sizes are asserted below.
//! The `*_nbx` calls arrived in UCX 1.10, and UCP keeps its ABI within major
//! version 1 by growing structs only at their end behind `field_mask` bits,
//! so the binding accepts UCP 1.10 to 1.x at load ([`MIN_VERSION`]); only
//! 1.13.1 was checked against its headers and tested.

use std::ffi::{c_char, c_int, c_uint, c_void, CStr, CString};
use std::fmt;
use std::ptr;

use libloading::Library;

/// Oldest UCP version the binding accepts: the first with `ucp_tag_send_nbx`.
pub const MIN_VERSION: (u32, u32) = (1, 10);
/// What to install when `libucp` is missing.
pub const INSTALL_HINT: &str = "install UCX: apt-get install libucx0 (Debian/Ubuntu)";
/// The library loaded unless `SHOAL_UCX_LIB` names another.
pub const DEFAULT_LIB: &str = "libucp.so.0";

/// `ucs_status_t`: a packed C enum (`UCS_S_PACKED`), one signed byte.
pub type Status = i8;
pub const UCS_OK: Status = 0;
pub const UCS_INPROGRESS: Status = 1;
/// `ucp_worker_arm`: events are pending, progress before sleeping.
pub const UCS_ERR_BUSY: Status = -4;
#[cfg(test)]
const UCS_ERR_CANCELED: Status = -16;

pub type Context = *mut c_void;
pub type Worker = *mut c_void;
pub type Ep = *mut c_void;
pub type Config = *mut c_void;
pub type Address = c_void;
pub type TagMessage = *mut c_void;
pub type UcpTag = u64;

// ucp_params_t.field_mask / features
pub const UCP_PARAM_FIELD_FEATURES: u64 = 1 << 0;
pub const UCP_PARAM_FIELD_TAG_SENDER_MASK: u64 = 1 << 4;
pub const UCP_PARAM_FIELD_ESTIMATED_NUM_EPS: u64 = 1 << 6;
pub const UCP_FEATURE_TAG: u64 = 1 << 0;
/// The worker gets an event fd to sleep on (`ucp_worker_get_efd`/`_arm`).
pub const UCP_FEATURE_WAKEUP: u64 = 1 << 4;
// ucp_worker_params_t
pub const UCP_WORKER_PARAM_FIELD_THREAD_MODE: u64 = 1 << 0;
pub const UCS_THREAD_MODE_SINGLE: c_int = 0;
// ucp_ep_params_t
pub const UCP_EP_PARAM_FIELD_REMOTE_ADDRESS: u64 = 1 << 0;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE: u64 = 1 << 1;
pub const UCP_EP_PARAM_FIELD_ERR_HANDLER: u64 = 1 << 2;
pub const UCP_ERR_HANDLING_MODE_NONE: c_int = 0;
pub const UCP_ERR_HANDLING_MODE_PEER: c_int = 1;
// ucp_request_param_t.op_attr_mask
pub const UCP_OP_ATTR_FIELD_DATATYPE: u32 = 1 << 3;
pub const UCP_OP_ATTR_FIELD_FLAGS: u32 = 1 << 4;
pub const UCP_EP_CLOSE_FLAG_FORCE: u32 = 1 << 0;
/// `ucp_dt_make_contig(1)`: contiguous bytes.
pub const DT_BYTES: u64 = 8;

/// `ucp_params_t` (80 bytes in 1.13).
#[repr(C)]
pub struct Params {
    pub field_mask: u64,
    pub features: u64,
    pub request_size: usize,
    pub request_init: *const c_void,
    pub request_cleanup: *const c_void,
    pub tag_sender_mask: u64,
    pub mt_workers_shared: c_int,
    pub estimated_num_eps: usize,
    pub estimated_num_ppn: usize,
    pub name: *const c_char,
}

/// `ucp_worker_params_t` (200 bytes in 1.13); only `thread_mode` is set,
/// the rest stays zero (and unread: `field_mask` says so).
#[repr(C)]
pub struct WorkerParams {
    pub field_mask: u64,
    pub thread_mode: c_int,
    _rest: [u8; 188],
}

/// `ucp_err_handler_t`.
#[repr(C)]
pub struct ErrHandler {
    pub cb: Option<unsafe extern "C" fn(arg: *mut c_void, ep: Ep, status: Status)>,
    pub arg: *mut c_void,
}

/// `ucp_ep_params_t` (104 bytes in 1.13); fields after `err_handler` unused.
#[repr(C)]
pub struct EpParams {
    pub field_mask: u64,
    pub address: *const Address,
    pub err_mode: c_int,
    pub err_handler: ErrHandler,
    _rest: [u8; 64],
}

/// `ucp_request_param_t` (72 bytes in 1.13).
#[repr(C)]
pub struct RequestParam {
    pub op_attr_mask: u32,
    pub flags: u32,
    pub request: *mut c_void,
    pub cb: *const c_void,
    pub datatype: u64,
    pub user_data: *mut c_void,
    pub reply_buffer: *mut c_void,
    pub memory_type: c_int,
    pub recv_info: *mut c_void,
    pub memh: *mut c_void,
}

/// `ucp_tag_recv_info_t`.
#[repr(C)]
#[derive(Default)]
pub struct TagRecvInfo {
    pub sender_tag: UcpTag,
    pub length: usize,
}

const _: () = assert!(std::mem::size_of::<Params>() == 80);
const _: () = assert!(std::mem::offset_of!(Params, name) == 72);
const _: () = assert!(std::mem::offset_of!(Params, estimated_num_eps) == 56);
const _: () = assert!(std::mem::size_of::<WorkerParams>() == 200);
const _: () = assert!(std::mem::size_of::<EpParams>() == 104);
const _: () = assert!(std::mem::offset_of!(EpParams, err_mode) == 16);
const _: () = assert!(std::mem::offset_of!(EpParams, err_handler) == 24);
const _: () = assert!(std::mem::size_of::<RequestParam>() == 72);
const _: () = assert!(std::mem::offset_of!(RequestParam, datatype) == 24);
const _: () = assert!(std::mem::offset_of!(RequestParam, memory_type) == 48);
const _: () = assert!(std::mem::size_of::<TagRecvInfo>() == 16);

impl RequestParam {
    /// Contiguous bytes, no callback (requests are polled), plus `flags`.
    pub fn bytes(flags: u32) -> RequestParam {
        RequestParam {
            op_attr_mask: UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FIELD_FLAGS,
            flags,
            request: ptr::null_mut(),
            cb: ptr::null(),
            datatype: DT_BYTES,
            user_data: ptr::null_mut(),
            reply_buffer: ptr::null_mut(),
            memory_type: 0,
            recv_info: ptr::null_mut(),
            memh: ptr::null_mut(),
        }
    }
}

impl WorkerParams {
    pub fn single_threaded() -> WorkerParams {
        WorkerParams {
            field_mask: UCP_WORKER_PARAM_FIELD_THREAD_MODE,
            thread_mode: UCS_THREAD_MODE_SINGLE,
            _rest: [0; 188],
        }
    }
}

impl EpParams {
    pub fn new(address: *const Address, err_mode: c_int, handler: ErrHandler) -> EpParams {
        EpParams {
            field_mask: UCP_EP_PARAM_FIELD_REMOTE_ADDRESS
                | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE
                | UCP_EP_PARAM_FIELD_ERR_HANDLER,
            address,
            err_mode,
            err_handler: handler,
            _rest: [0; 64],
        }
    }
}

/// A `ucs_status_ptr_t`: null (done), an error status, or a request.
pub enum StatusPtr {
    Done,
    Err(Status),
    Request(*mut c_void),
}

impl StatusPtr {
    fn of(p: *mut c_void) -> StatusPtr {
        // UCS_PTR_IS_ERR: the pointer's value is a negative status (>= UCS_ERR_LAST = -100).
        let v = p as isize;
        if p.is_null() {
            StatusPtr::Done
        } else if (-100..0).contains(&v) {
            StatusPtr::Err(v as Status)
        } else {
            StatusPtr::Request(p)
        }
    }
}

/// The loaded library: the functions used, resolved once.
pub struct Ucp {
    _lib: Library,
    pub version: (u32, u32, u32),
    config_read: unsafe extern "C" fn(*const c_char, *const c_char, *mut Config) -> Status,
    config_modify: unsafe extern "C" fn(Config, *const c_char, *const c_char) -> Status,
    config_release: unsafe extern "C" fn(Config),
    init_version:
        unsafe extern "C" fn(c_uint, c_uint, *const Params, Config, *mut Context) -> Status,
    pub cleanup: unsafe extern "C" fn(Context),
    worker_create: unsafe extern "C" fn(Context, *const WorkerParams, *mut Worker) -> Status,
    pub worker_destroy: unsafe extern "C" fn(Worker),
    worker_get_address: unsafe extern "C" fn(Worker, *mut *mut Address, *mut usize) -> Status,
    worker_release_address: unsafe extern "C" fn(Worker, *mut Address),
    pub worker_progress: unsafe extern "C" fn(Worker) -> c_uint,
    worker_get_efd: unsafe extern "C" fn(Worker, *mut c_int) -> Status,
    worker_arm: unsafe extern "C" fn(Worker) -> Status,
    ep_create: unsafe extern "C" fn(Worker, *const EpParams, *mut Ep) -> Status,
    ep_close_nbx: unsafe extern "C" fn(Ep, *const RequestParam) -> *mut c_void,
    ep_flush_nbx: unsafe extern "C" fn(Ep, *const RequestParam) -> *mut c_void,
    tag_send_nbx:
        unsafe extern "C" fn(Ep, *const c_void, usize, UcpTag, *const RequestParam) -> *mut c_void,
    tag_send_sync_nbx:
        unsafe extern "C" fn(Ep, *const c_void, usize, UcpTag, *const RequestParam) -> *mut c_void,
    tag_recv_nbx: unsafe extern "C" fn(
        Worker,
        *mut c_void,
        usize,
        UcpTag,
        UcpTag,
        *const RequestParam,
    ) -> *mut c_void,
    tag_probe_nb:
        unsafe extern "C" fn(Worker, UcpTag, UcpTag, c_int, *mut TagRecvInfo) -> TagMessage,
    tag_msg_recv_nbx: unsafe extern "C" fn(
        Worker,
        *mut c_void,
        usize,
        TagMessage,
        *const RequestParam,
    ) -> *mut c_void,
    request_check_status: unsafe extern "C" fn(*mut c_void) -> Status,
    request_cancel: unsafe extern "C" fn(Worker, *mut c_void),
    request_free: unsafe extern "C" fn(*mut c_void),
    status_string: unsafe extern "C" fn(Status) -> *const c_char,
}

// SAFETY: the function pointers are plain C entry points; the library stays
// loaded while `_lib` lives.
unsafe impl Send for Ucp {}
unsafe impl Sync for Ucp {}

/// Why UCX could not be loaded or set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UcxError {
    /// `path` could not be loaded, or lacks a UCP entry point (`why`).
    Load { path: String, why: String },
    /// `path` is a UCX version this binding does not speak.
    Version {
        path: String,
        found: (u32, u32, u32),
    },
    /// A UCP call (`what`) returned an error status, in UCX's own words.
    Call { what: &'static str, status: String },
}

impl fmt::Display for UcxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UcxError::Load { path, why } => write!(
                f,
                "ucx: cannot load {path} ({why}); {INSTALL_HINT}, or point SHOAL_UCX_LIB at libucp.so"
            ),
            UcxError::Version {
                path,
                found: (major, minor, release),
            } => write!(
                f,
                "ucx: {path} is UCX {major}.{minor}.{release}; shoal's binding needs UCX \
                 {}.{} to {}.x ({INSTALL_HINT})",
                MIN_VERSION.0, MIN_VERSION.1, MIN_VERSION.0
            ),
            UcxError::Call { what, status } => write!(f, "ucx: {what}: {status}"),
        }
    }
}

impl std::error::Error for UcxError {}

/// For callers that report errors as text (the core's `Error::runtime`).
impl From<UcxError> for String {
    fn from(e: UcxError) -> String {
        e.to_string()
    }
}

fn load_err(path: &str, why: String) -> UcxError {
    UcxError::Load {
        path: path.to_string(),
        why,
    }
}

impl Ucp {
    /// Loads `path` (a file name searched like `dlopen` does, or a path) and
    /// checks its version.
    pub fn load(path: &str) -> Result<Ucp, UcxError> {
        // SAFETY: loading UCP runs its constructors, which only set up UCX.
        let lib = unsafe { Library::new(path) }.map_err(|e| load_err(path, e.to_string()))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol's C type is the field's, per the UCP headers.
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| load_err(path, format!("missing {}: {e}", $name)))?
            };
        }
        let get_version: unsafe extern "C" fn(*mut c_uint, *mut c_uint, *mut c_uint) =
            sym!("ucp_get_version");
        let (mut major, mut minor, mut release) = (0, 0, 0);
        // SAFETY: three out-parameters.
        unsafe { get_version(&mut major, &mut minor, &mut release) };
        if major != MIN_VERSION.0 || minor < MIN_VERSION.1 {
            return Err(UcxError::Version {
                path: path.to_string(),
                found: (major, minor, release),
            });
        }
        Ok(Ucp {
            version: (major, minor, release),
            config_read: sym!("ucp_config_read"),
            config_modify: sym!("ucp_config_modify"),
            config_release: sym!("ucp_config_release"),
            init_version: sym!("ucp_init_version"),
            cleanup: sym!("ucp_cleanup"),
            worker_create: sym!("ucp_worker_create"),
            worker_destroy: sym!("ucp_worker_destroy"),
            worker_get_address: sym!("ucp_worker_get_address"),
            worker_release_address: sym!("ucp_worker_release_address"),
            worker_progress: sym!("ucp_worker_progress"),
            worker_get_efd: sym!("ucp_worker_get_efd"),
            worker_arm: sym!("ucp_worker_arm"),
            ep_create: sym!("ucp_ep_create"),
            ep_close_nbx: sym!("ucp_ep_close_nbx"),
            ep_flush_nbx: sym!("ucp_ep_flush_nbx"),
            tag_send_nbx: sym!("ucp_tag_send_nbx"),
            tag_send_sync_nbx: sym!("ucp_tag_send_sync_nbx"),
            tag_recv_nbx: sym!("ucp_tag_recv_nbx"),
            tag_probe_nb: sym!("ucp_tag_probe_nb"),
            tag_msg_recv_nbx: sym!("ucp_tag_msg_recv_nbx"),
            request_check_status: sym!("ucp_request_check_status"),
            request_cancel: sym!("ucp_request_cancel"),
            request_free: sym!("ucp_request_free"),
            status_string: sym!("ucs_status_string"),
            _lib: lib,
        })
    }

    /// UCX's own words for `s`.
    pub fn describe(&self, s: Status) -> String {
        // SAFETY: returns a static string for any status.
        let p = unsafe { (self.status_string)(s) };
        if p.is_null() {
            return format!("status {s}");
        }
        // SAFETY: a NUL-terminated static string.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn check(&self, what: &'static str, s: Status) -> Result<(), UcxError> {
        if s == UCS_OK {
            Ok(())
        } else {
            Err(UcxError::Call {
                what,
                status: self.describe(s),
            })
        }
    }

    /// A context with the tagged API, configured from the `UCX_*`
    /// environment and then `overrides` (UCX names without the prefix)
    /// that the environment does not set itself.
    pub fn init(&self, overrides: &[(&str, &str)], num_eps: usize) -> Result<Context, UcxError> {
        let mut cfg: Config = ptr::null_mut();
        // SAFETY: null prefix and file: read UCX_* variables.
        self.check("ucp_config_read", unsafe {
            (self.config_read)(ptr::null(), ptr::null(), &mut cfg)
        })?;
        for (name, value) in overrides {
            if std::env::var_os(format!("UCX_{name}")).is_some() {
                continue;
            }
            let (n, v) = (CString::new(*name).unwrap(), CString::new(*value).unwrap());
            // SAFETY: a live config and two C strings. A name this UCX does
            // not know is reported, not fatal.
            let s = unsafe { (self.config_modify)(cfg, n.as_ptr(), v.as_ptr()) };
            if s != UCS_OK {
                tracing::debug!("ucx: UCX_{name}={value} not applied: {}", self.describe(s));
            }
        }
        let params = Params {
            field_mask: UCP_PARAM_FIELD_FEATURES
                | UCP_PARAM_FIELD_TAG_SENDER_MASK
                | UCP_PARAM_FIELD_ESTIMATED_NUM_EPS,
            features: UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP,
            request_size: 0,
            request_init: ptr::null(),
            request_cleanup: ptr::null(),
            tag_sender_mask: super::SENDER_MASK,
            mt_workers_shared: 0,
            estimated_num_eps: num_eps,
            estimated_num_ppn: 0,
            name: ptr::null(),
        };
        let mut ctx: Context = ptr::null_mut();
        // SAFETY: valid params and config; the API version this binding was
        // written against.
        let s =
            unsafe { (self.init_version)(MIN_VERSION.0, MIN_VERSION.1, &params, cfg, &mut ctx) };
        // SAFETY: the config is no longer needed once the context exists.
        unsafe { (self.config_release)(cfg) };
        self.check("ucp_init", s)?;
        Ok(ctx)
    }

    pub fn worker(&self, ctx: Context) -> Result<Worker, UcxError> {
        let mut w: Worker = ptr::null_mut();
        let p = WorkerParams::single_threaded();
        // SAFETY: a live context.
        self.check("ucp_worker_create", unsafe {
            (self.worker_create)(ctx, &p, &mut w)
        })?;
        Ok(w)
    }

    /// The file descriptor that becomes readable when the worker has
    /// events, once armed ([`Ucp::arm`]).
    pub fn event_fd(&self, w: Worker) -> Result<c_int, UcxError> {
        let mut fd: c_int = -1;
        // SAFETY: a live worker of a context with `UCP_FEATURE_WAKEUP`.
        self.check("ucp_worker_get_efd", unsafe {
            (self.worker_get_efd)(w, &mut fd)
        })?;
        Ok(fd)
    }

    /// Arms the worker's event fd: `UCS_OK` when it is safe to sleep on it,
    /// `UCS_ERR_BUSY` when events are pending (progress first).
    ///
    /// # Safety
    /// `w` is live and used by this thread only.
    pub unsafe fn arm(&self, w: Worker) -> Status {
        (self.worker_arm)(w)
    }

    /// The worker's address, to publish.
    pub fn address(&self, w: Worker) -> Result<Vec<u8>, UcxError> {
        let (mut a, mut len) = (ptr::null_mut(), 0usize);
        // SAFETY: a live worker; the address is copied and released.
        unsafe {
            self.check(
                "ucp_worker_get_address",
                (self.worker_get_address)(w, &mut a, &mut len),
            )?;
            let bytes = std::slice::from_raw_parts(a as *const u8, len).to_vec();
            (self.worker_release_address)(w, a);
            Ok(bytes)
        }
    }

    /// # Safety
    /// `w` is live; `handler.arg` outlives the endpoint.
    pub unsafe fn connect(
        &self,
        w: Worker,
        address: &[u8],
        err_mode: c_int,
        handler: ErrHandler,
    ) -> Result<Ep, UcxError> {
        let p = EpParams::new(address.as_ptr().cast(), err_mode, handler);
        let mut ep: Ep = ptr::null_mut();
        self.check("ucp_ep_create", (self.ep_create)(w, &p, &mut ep))?;
        Ok(ep)
    }

    /// # Safety
    /// `ep` is live and not used afterwards.
    pub unsafe fn close(&self, ep: Ep, force: bool) -> StatusPtr {
        let p = RequestParam::bytes(if force { UCP_EP_CLOSE_FLAG_FORCE } else { 0 });
        StatusPtr::of((self.ep_close_nbx)(ep, &p))
    }

    /// Completes once everything sent on `ep` arrived, which first
    /// finishes the endpoint's wire-up with its peer.
    ///
    /// # Safety
    /// `ep` is live.
    pub unsafe fn flush(&self, ep: Ep) -> StatusPtr {
        let p = RequestParam::bytes(0);
        StatusPtr::of((self.ep_flush_nbx)(ep, &p))
    }

    /// # Safety
    /// `data[..len]` stays valid until the request completes.
    pub unsafe fn send(&self, ep: Ep, data: *const u8, len: usize, tag: UcpTag) -> StatusPtr {
        let p = RequestParam::bytes(0);
        StatusPtr::of((self.tag_send_nbx)(ep, data.cast(), len, tag, &p))
    }

    /// Like [`Ucp::send`], but completes only once the receiver has
    /// received the message, so UCX holds no unbounded eager copies of
    /// payloads the receiver has not asked for.
    ///
    /// # Safety
    /// `data[..len]` stays valid until the request completes.
    pub unsafe fn send_sync(&self, ep: Ep, data: *const u8, len: usize, tag: UcpTag) -> StatusPtr {
        let p = RequestParam::bytes(0);
        StatusPtr::of((self.tag_send_sync_nbx)(ep, data.cast(), len, tag, &p))
    }

    /// # Safety
    /// `buf[..len]` stays valid and untouched until the request completes.
    pub unsafe fn recv(&self, w: Worker, buf: *mut u8, len: usize, tag: UcpTag) -> StatusPtr {
        let p = RequestParam::bytes(0);
        StatusPtr::of((self.tag_recv_nbx)(w, buf.cast(), len, tag, u64::MAX, &p))
    }

    /// Takes the oldest arrived message whose tag matches `tag` under
    /// `mask` out of UCX's unexpected queue: its handle, sender tag and length.
    pub fn probe(&self, w: Worker, tag: UcpTag, mask: UcpTag) -> Option<(TagMessage, TagRecvInfo)> {
        let mut info = TagRecvInfo::default();
        // SAFETY: a live worker; remove = 1 hands the message to us.
        let m = unsafe { (self.tag_probe_nb)(w, tag, mask, 1, &mut info) };
        (!m.is_null()).then_some((m, info))
    }

    /// # Safety
    /// `m` came from [`Ucp::probe`]; `buf[..len]` as for [`Ucp::recv`].
    pub unsafe fn recv_probed(
        &self,
        w: Worker,
        buf: *mut u8,
        len: usize,
        m: TagMessage,
    ) -> StatusPtr {
        let p = RequestParam::bytes(0);
        StatusPtr::of((self.tag_msg_recv_nbx)(w, buf.cast(), len, m, &p))
    }

    /// The state of a request: `UCS_INPROGRESS` or its final status.
    ///
    /// # Safety
    /// `req` is a live request.
    pub unsafe fn status(&self, req: *mut c_void) -> Status {
        (self.request_check_status)(req)
    }

    /// # Safety
    /// `req` is a live request; it completes (cancelled) at a later progress.
    pub unsafe fn cancel(&self, w: Worker, req: *mut c_void) {
        (self.request_cancel)(w, req)
    }

    /// # Safety
    /// `req` is a live request, not used afterwards.
    pub unsafe fn free(&self, req: *mut c_void) {
        (self.request_free)(req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_library_names_the_package() {
        let e = Ucp::load("/nonexistent/libucp.so.0").err().unwrap();
        assert!(matches!(e, UcxError::Load { .. }), "{e:?}");
        let e = e.to_string();
        assert!(e.contains("apt-get install libucx0"), "{e}");
        assert!(e.contains("SHOAL_UCX_LIB"), "{e}");
    }

    #[test]
    fn status_pointers_decode() {
        assert!(matches!(StatusPtr::of(ptr::null_mut()), StatusPtr::Done));
        assert!(matches!(
            StatusPtr::of(-16isize as *mut c_void),
            StatusPtr::Err(UCS_ERR_CANCELED)
        ));
        assert!(matches!(
            StatusPtr::of(0x1000 as *mut c_void),
            StatusPtr::Request(_)
        ));
    }
}

#[cfg(test)]
mod wakeup_tests {
    use super::*;

    /// `wait` sleeps on the worker's event fd; a context without
    /// `UCP_FEATURE_WAKEUP` would give none (and `wait` would nap).
    #[test]
    fn worker_gives_an_armable_event_fd() {
        let Ok(ucp) = Ucp::load(DEFAULT_LIB) else {
            eprintln!("skipped: {DEFAULT_LIB} is not installed");
            return;
        };
        let ctx = ucp.init(&[], 1).unwrap();
        let w = ucp.worker(ctx).unwrap();
        let fd = ucp.event_fd(w).unwrap();
        assert!(fd >= 0);
        // SAFETY: a live worker on this thread; destroyed once, then the context.
        unsafe {
            while (ucp.worker_progress)(w) != 0 {}
            let s = ucp.arm(w);
            assert!(s == UCS_OK || s == UCS_ERR_BUSY, "{}", ucp.describe(s));
            (ucp.worker_destroy)(w);
            (ucp.cleanup)(ctx);
        }
    }
}
