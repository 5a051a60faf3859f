//! Device selectors: CEL expressions over one device, as upstream's
//! `k8s.io/dynamic-resource-allocation/cel` evaluates them (with the `cel` crate).
//!
//! An expression sees one variable, `device`, with
//! - `device.driver` (string),
//! - `device.allowMultipleAllocations` (bool),
//! - `device.attributes[domain][id]`: bool, int, string, or a semver for `version` attributes; an
//!   attribute without a domain belongs to the driver's domain; an unknown domain is an empty map
//!   (so `"x" in device.attributes["other.example.com"]` is false, not an error);
//! - `device.capacity[domain][id]`: a quantity.
//!
//! Supported beyond standard CEL (operators, `size`, `has`, `all`, `exists`, `exists_one`, `map`,
//! `filter`, `matches`, `startsWith`, `endsWith`, `contains`, conversions): the strings extension
//! (`lowerAscii`, `upperAscii`, `split`, `replace`, `trim`, `substring`, `indexOf`, `join`, ...),
//! `cel.bind`, Kubernetes' quantity library (`quantity`, `isQuantity`, and on quantities
//! `compareTo`, `isGreaterThan`, `isLessThan`, `isInteger`, `asInteger`, `asApproximateFloat`,
//! `sign`, `add`, `sub`) and semver library (`semver`, `isSemver`, and on versions `major`,
//! `minor`, `patch`, `compareTo`, `isGreaterThan`, `isLessThan`). Any other function (Kubernetes'
//! `ip`, `cidr`, `url`, `format` and list libraries, for example) is refused when the expression is
//! compiled, with an error naming it: a selector ksched cannot evaluate never matches silently.

use std::any::Any;
use std::cmp::Ordering;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use cel::common::ast::{ComprehensionExpr, Expr, IdedExpr, ListExpr, LiteralValue};
use cel::common::traits::{Container, Indexer, Iterable, Sizer};
use cel::common::types::{
    self, CelBool, CelDouble, CelInt, CelMap, CelMapKey, CelString, Kind, Type,
};
use cel::common::value::{CowVal, StaticVal, Val};
use cel::parser::{Macro, MacroExprHelper, ParseError};
use cel::{Context, Env, ExecutionError, Program, Value};
use k8s_openapi::api::resource::v1::{DeviceAttribute, DeviceCapacity};
use parking_lot::Mutex;

use crate::quantity;

/// Functions an expression may call: the CEL standard library, the strings extension and the
/// Kubernetes libraries implemented here. Macros (`has`, `all`, ...) never reach evaluation as calls.
const SUPPORTED_FUNCTIONS: &[&str] = &[
    // standard
    "size",
    "int",
    "uint",
    "double",
    "string",
    "bytes",
    "bool",
    "type",
    "dyn",
    "matches",
    "startsWith",
    "endsWith",
    "contains",
    // strings extension
    "charAt",
    "indexOf",
    "lastIndexOf",
    "lowerAscii",
    "upperAscii",
    "replace",
    "split",
    "substring",
    "trim",
    "join",
    "quote",
    "reverse",
    // Kubernetes quantity library
    "quantity",
    "isQuantity",
    "isInteger",
    "asInteger",
    "asApproximateFloat",
    "sign",
    "add",
    "sub",
    // Kubernetes semver library
    "semver",
    "isSemver",
    "major",
    "minor",
    "patch",
    // both
    "compareTo",
    "isGreaterThan",
    "isLessThan",
];

/// What a selector's device looks like to the expression.
pub(crate) struct DeviceInput<'a> {
    pub driver: &'a str,
    pub allow_multiple_allocations: bool,
    pub attributes: Option<&'a BTreeMap<String, DeviceAttribute>>,
    pub capacity: Option<&'a BTreeMap<String, DeviceCapacity>>,
}

/// A compiled selector expression.
pub(crate) struct Selector {
    program: Program,
}

impl std::fmt::Debug for Selector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Selector")
    }
}

static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| Arc::new(build_env()));

/// Compiles `expression`; the error says what is wrong or unsupported.
pub(crate) fn compile(expression: &str) -> Result<Selector, String> {
    let program = ENV
        .compile(expression)
        .map_err(|e| format!("compilation failed: {e}"))?;
    let refs = program.references();
    let mut unsupported: Vec<&str> = refs
        .functions()
        .into_iter()
        .filter(|f| !is_operator(f) && !SUPPORTED_FUNCTIONS.contains(f))
        .collect();
    unsupported.sort_unstable();
    if !unsupported.is_empty() {
        return Err(format!(
            "compilation failed: function(s) not supported by ksched: {}",
            unsupported.join(", ")
        ));
    }
    Ok(Selector { program })
}

/// Operators parse as calls named like `_==_`, `!_`, `@in`, `@not_strictly_false`.
fn is_operator(name: &str) -> bool {
    name.starts_with('_') || name.starts_with('@') || name.starts_with('!')
}

impl Selector {
    /// Whether the device matches; an error when the expression fails at run time or does not
    /// evaluate to a bool.
    pub(crate) fn matches(&self, device: &DeviceInput<'_>) -> Result<bool, String> {
        let mut ctx = Context::with_env(ENV.clone());
        ctx.add_variable_as_val("device", Box::new(device_value(device)?));
        match self.program.execute(&ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(format!("must evaluate to bool, not {other:?}")),
            Err(e) => Err(e.to_string()),
        }
    }
}

/// Compiled selectors by expression, shared by every scheduling cycle (upstream keeps an LRU of
/// them). Compile errors are kept too: a broken expression is not compiled again per device.
#[derive(Default)]
pub(crate) struct Cache {
    compiled: Mutex<HashMap<String, Arc<Result<Selector, String>>>>,
}

/// More distinct expressions than this and the cache starts over.
const CACHE_LIMIT: usize = 256;

impl Cache {
    pub(crate) fn get_or_compile(&self, expression: &str) -> Arc<Result<Selector, String>> {
        if let Some(c) = self.compiled.lock().get(expression) {
            return c.clone();
        }
        let compiled = Arc::new(compile(expression));
        let mut map = self.compiled.lock();
        if map.len() >= CACHE_LIMIT {
            map.clear();
        }
        map.insert(expression.to_string(), compiled.clone());
        compiled
    }
}

impl std::fmt::Debug for Cache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cache")
            .field("len", &self.compiled.lock().len())
            .finish()
    }
}

// ----- the `device` variable -----

fn key(s: impl Into<String>) -> CelMapKey<'static> {
    CelMapKey::from(s.into())
}

/// `domain/id` split as upstream's `parseQualifiedName`: no domain means the driver's.
fn qualified<'a>(name: &'a str, driver: &'a str) -> (&'a str, &'a str) {
    match name.split_once('/') {
        Some((domain, id)) => (domain, id),
        None => (driver, name),
    }
}

fn device_value(device: &DeviceInput<'_>) -> Result<CelMap<'static>, String> {
    let mut attributes: HashMap<String, HashMap<CelMapKey<'static>, Box<dyn Val>>> = HashMap::new();
    for (name, attr) in device.attributes.into_iter().flatten() {
        let value = attribute_value(attr).map_err(|e| format!("attribute {name}: {e}"))?;
        let (domain, id) = qualified(name, device.driver);
        attributes
            .entry(domain.to_string())
            .or_default()
            .insert(key(id), value);
    }
    let mut capacity: HashMap<String, HashMap<CelMapKey<'static>, Box<dyn Val>>> = HashMap::new();
    for (name, cap) in device.capacity.into_iter().flatten() {
        let q = Quantity::parse(&cap.value.0).map_err(|e| format!("capacity {name}: {e}"))?;
        let (domain, id) = qualified(name, device.driver);
        capacity
            .entry(domain.to_string())
            .or_default()
            .insert(key(id), Box::new(q));
    }
    let mut fields: HashMap<CelMapKey<'static>, Box<dyn Val>> = HashMap::new();
    fields.insert(
        key("driver"),
        Box::new(CelString::from(device.driver.to_string())),
    );
    fields.insert(
        key("allowMultipleAllocations"),
        Box::new(CelBool::from(device.allow_multiple_allocations)),
    );
    fields.insert(key("attributes"), Box::new(DomainMap::new(attributes)));
    fields.insert(key("capacity"), Box::new(DomainMap::new(capacity)));
    Ok(CelMap::from(fields))
}

fn attribute_value(attr: &DeviceAttribute) -> Result<Box<dyn Val>, String> {
    if let Some(b) = attr.bool {
        return Ok(Box::new(CelBool::from(b)));
    }
    if let Some(i) = attr.int {
        return Ok(Box::new(CelInt::from(i)));
    }
    if let Some(s) = &attr.string {
        return Ok(Box::new(CelString::from(s.to_owned())));
    }
    if let Some(v) = &attr.version {
        return Ok(Box::new(Semver::parse(v)?));
    }
    // List attributes need DRAListTypeAttributes (alpha, off in 1.36), as upstream.
    Err("unsupported attribute value".to_string())
}

/// The parts of [`Val`] every value type of this module has the same way: its one CEL type, its
/// copy, and its downcast (with [`StaticVal`]).
macro_rules! static_val {
    ($cel_type:expr) => {
        fn get_type(&self) -> &Type {
            <Self as Val>::cel_type()
        }

        fn cel_type() -> &'static Type {
            &$cel_type
        }

        fn clone_as_boxed<'w>(&self) -> Box<dyn Val + 'w>
        where
            Self: 'w,
        {
            Box::new(<Self as Clone>::clone(self))
        }

        fn as_any(&self) -> Option<&dyn Any> {
            Some(self)
        }
    };
}

/// `device.attributes` and `device.capacity`: domain -> id -> value, where an unknown domain is an
/// empty map (upstream's `newStringInterfaceMapWithDefault`).
#[derive(Debug, Clone)]
struct DomainMap {
    domains: CelMap<'static>,
    empty: CelMap<'static>,
}

impl DomainMap {
    fn new(domains: HashMap<String, HashMap<CelMapKey<'static>, Box<dyn Val>>>) -> DomainMap {
        let domains: HashMap<CelMapKey<'static>, Box<dyn Val>> = domains
            .into_iter()
            .map(|(d, ids)| (key(d), Box::new(CelMap::from(ids)) as Box<dyn Val>))
            .collect();
        DomainMap {
            domains: CelMap::from(domains),
            empty: CelMap::default(),
        }
    }
}

impl Val for DomainMap {
    static_val!(types::MAP_TYPE);

    fn as_container(&self) -> Option<&dyn Container> {
        Some(self)
    }

    fn as_indexer<'b, 'w>(&'b self) -> Option<&'b (dyn Indexer + 'w)>
    where
        Self: 'w,
    {
        Some(self)
    }

    fn as_iterable<'b, 'w>(&'b self) -> Option<&'b (dyn Iterable + 'w)>
    where
        Self: 'w,
    {
        self.domains.as_iterable()
    }

    fn as_sizer(&self) -> Option<&dyn Sizer> {
        self.domains.as_sizer()
    }

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<DomainMap>()
            .is_some_and(|o| self.domains.equals(&o.domains))
    }
}

impl StaticVal for DomainMap {}

impl Container for DomainMap {
    fn contains(&self, key: &dyn Val) -> Result<bool, ExecutionError> {
        self.domains.contains(key)
    }
}

impl Indexer for DomainMap {
    fn get<'b, 'w>(&'b self, idx: &dyn Val) -> Result<CowVal<'b, 'w>, ExecutionError>
    where
        Self: 'w,
    {
        match self.domains.get(idx) {
            Ok(v) => Ok(v),
            Err(ExecutionError::NoSuchKey(_)) => Ok(CowVal::Borrowed(&self.empty)),
            Err(e) => Err(e),
        }
    }

    fn steal<'w>(self: Box<Self>, idx: &dyn Val) -> Result<Box<dyn Val + 'w>, ExecutionError>
    where
        Self: 'w,
    {
        self.get(idx).map(CowVal::into_owned)
    }
}

// ----- Kubernetes' quantity library -----

static QUANTITY_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.Quantity");

/// A `resource.Quantity`, kept at nano precision (as `crate::quantity` parses it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Quantity {
    nanos: i128,
}

const NANOS_PER_UNIT: i128 = 1_000_000_000;

impl Quantity {
    pub(crate) fn parse(s: &str) -> Result<Quantity, String> {
        quantity::parse(s)
            .map(|p| Quantity { nanos: p.nanos() })
            .map_err(|e| e.to_string())
    }

    fn as_integer(self) -> Option<i64> {
        if self.nanos % NANOS_PER_UNIT != 0 {
            return None;
        }
        i64::try_from(self.nanos / NANOS_PER_UNIT).ok()
    }
}

impl Val for Quantity {
    static_val!(QUANTITY_TYPE);

    fn equals(&self, other: &dyn Val) -> bool {
        other.downcast_ref::<Quantity>() == Some(self)
    }
}

impl StaticVal for Quantity {}

// ----- Kubernetes' semver library -----

static SEMVER_TYPE: Type = Type::simple_type(Kind::Opaque, "kubernetes.Semver");

/// A semantic version (semver 2.0.0, strict, as upstream parses `version` attributes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Semver(semver::Version);

impl Semver {
    pub(crate) fn parse(s: &str) -> Result<Semver, String> {
        semver::Version::parse(s)
            .map(Semver)
            .map_err(|e| format!("invalid semver {s:?}: {e}"))
    }
}

impl Val for Semver {
    static_val!(SEMVER_TYPE);

    fn equals(&self, other: &dyn Val) -> bool {
        other
            .downcast_ref::<Semver>()
            .is_some_and(|o| o.0.cmp_precedence(&self.0) == Ordering::Equal)
    }
}

impl StaticVal for Semver {}

// ----- the environment -----

type Args<'b, 'v> = Vec<CowVal<'b, 'v>>;
type Ret<'b, 'v> = Result<CowVal<'b, 'v>, ExecutionError>;

fn arg<'a, T: StaticVal>(
    args: &'a [CowVal<'_, '_>],
    i: usize,
    f: &str,
) -> Result<&'a T, ExecutionError> {
    args.get(i)
        .and_then(|a| a.as_any())
        .and_then(|a| a.downcast_ref::<T>())
        .ok_or_else(|| ExecutionError::function_error(f, "unexpected argument type"))
}

fn str_arg<'a>(args: &'a [CowVal<'_, '_>], f: &str) -> Result<&'a str, ExecutionError> {
    args.first()
        .and_then(|a| a.downcast_ref::<CelString>())
        .map(|s| s.inner())
        .ok_or_else(|| ExecutionError::function_error(f, "expected a string"))
}

fn int_arg(args: &[CowVal<'_, '_>], i: usize, f: &str) -> Result<i64, ExecutionError> {
    args.get(i)
        .and_then(|a| a.downcast_ref::<CelInt>())
        .map(|v| *v.inner())
        .ok_or_else(|| ExecutionError::function_error(f, "expected an int"))
}

fn owned<'b, 'v, T: Val + 'v>(v: T) -> Ret<'b, 'v> {
    Ok(CowVal::owned(v))
}

fn ordering(o: Ordering) -> i64 {
    match o {
        Ordering::Less => -1,
        Ordering::Equal => 0,
        Ordering::Greater => 1,
    }
}

fn f_quantity<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, "quantity")?;
    Quantity::parse(s)
        .map(CowVal::owned)
        .map_err(|e| ExecutionError::function_error("quantity", e))
}

fn f_is_quantity<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    owned(CelBool::from(
        Quantity::parse(str_arg(&args, "isQuantity")?).is_ok(),
    ))
}

fn quantities(args: &[CowVal<'_, '_>], f: &str) -> Result<(Quantity, Quantity), ExecutionError> {
    Ok((*arg::<Quantity>(args, 0, f)?, *arg::<Quantity>(args, 1, f)?))
}

fn f_quantity_compare_to<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = quantities(&args, "compareTo")?;
    owned(CelInt::from(ordering(a.nanos.cmp(&b.nanos))))
}

fn f_quantity_greater<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = quantities(&args, "isGreaterThan")?;
    owned(CelBool::from(a.nanos > b.nanos))
}

fn f_quantity_less<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = quantities(&args, "isLessThan")?;
    owned(CelBool::from(a.nanos < b.nanos))
}

fn f_quantity_is_integer<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = arg::<Quantity>(&args, 0, "isInteger")?;
    owned(CelBool::from(q.as_integer().is_some()))
}

fn f_quantity_as_integer<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = arg::<Quantity>(&args, 0, "asInteger")?;
    q.as_integer()
        .map(|i| CowVal::owned(CelInt::from(i)))
        .ok_or_else(|| {
            ExecutionError::function_error("asInteger", "cannot convert value to integer")
        })
}

fn f_quantity_as_float<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = arg::<Quantity>(&args, 0, "asApproximateFloat")?;
    owned(CelDouble::from(q.nanos as f64 / NANOS_PER_UNIT as f64))
}

fn f_quantity_sign<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let q = arg::<Quantity>(&args, 0, "sign")?;
    owned(CelInt::from(ordering(q.nanos.cmp(&0))))
}

fn arithmetic<'b, 'v>(args: Args<'b, 'v>, f: &str, sign: i128) -> Ret<'b, 'v> {
    let a = *arg::<Quantity>(&args, 0, f)?;
    let b = match arg::<Quantity>(&args, 1, f) {
        Ok(q) => q.nanos,
        Err(_) => i128::from(int_arg(&args, 1, f)?) * NANOS_PER_UNIT,
    };
    owned(Quantity {
        nanos: a.nanos + sign * b,
    })
}

fn f_quantity_add<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    arithmetic(args, "add", 1)
}

fn f_quantity_sub<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    arithmetic(args, "sub", -1)
}

fn f_semver<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let s = str_arg(&args, "semver")?;
    Semver::parse(s)
        .map(CowVal::owned)
        .map_err(|e| ExecutionError::function_error("semver", e))
}

fn f_is_semver<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    owned(CelBool::from(
        Semver::parse(str_arg(&args, "isSemver")?).is_ok(),
    ))
}

fn semvers<'a>(
    args: &'a [CowVal<'_, '_>],
    f: &str,
) -> Result<(&'a Semver, &'a Semver), ExecutionError> {
    Ok((arg::<Semver>(args, 0, f)?, arg::<Semver>(args, 1, f)?))
}

fn f_semver_compare_to<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = semvers(&args, "compareTo")?;
    owned(CelInt::from(ordering(a.0.cmp_precedence(&b.0))))
}

fn f_semver_greater<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = semvers(&args, "isGreaterThan")?;
    owned(CelBool::from(a.0.cmp_precedence(&b.0) == Ordering::Greater))
}

fn f_semver_less<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    let (a, b) = semvers(&args, "isLessThan")?;
    owned(CelBool::from(a.0.cmp_precedence(&b.0) == Ordering::Less))
}

fn semver_part<'b, 'v>(
    args: Args<'b, 'v>,
    f: &str,
    part: fn(&semver::Version) -> u64,
) -> Ret<'b, 'v> {
    let v = arg::<Semver>(&args, 0, f)?;
    let n = i64::try_from(part(&v.0))
        .map_err(|_| ExecutionError::function_error(f, "version part out of range"))?;
    owned(CelInt::from(n))
}

fn f_semver_major<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    semver_part(args, "major", |v| v.major)
}

fn f_semver_minor<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    semver_part(args, "minor", |v| v.minor)
}

fn f_semver_patch<'b, 'v>(args: Args<'b, 'v>) -> Ret<'b, 'v> {
    semver_part(args, "patch", |v| v.patch)
}

/// `cel.bind(var, init, body)`, as cel-go's bindings extension: `body` with `var` bound to
/// `init`, written as a comprehension over nothing whose accumulator is `var`.
fn bind_macro(
    helper: &mut MacroExprHelper<'_>,
    target: &mut Option<IdedExpr>,
    args: &mut Vec<IdedExpr>,
) -> Result<Option<IdedExpr>, ParseError> {
    let is_cel =
        matches!(target.as_ref().map(|t| &t.expr), Some(Expr::Ident(name)) if name == "cel");
    if !is_cel || args.len() != 3 {
        return Ok(None);
    }
    let var = match &args[0].expr {
        Expr::Ident(name) => name.clone(),
        _ => {
            return Err(helper.new_error(
                args[0].id,
                "cel.bind() variable name must be a simple identifier",
            ));
        }
    };
    let body = args.remove(2);
    let init = args.remove(1);
    let bind = ComprehensionExpr {
        iter_range: helper.next_expr(Expr::List(ListExpr::new(Vec::new()))),
        iter_var: "#unused".to_owned(),
        iter_var2: None,
        accu_var: var.clone(),
        accu_init: init,
        loop_cond: helper.next_expr(Expr::Literal(LiteralValue::Boolean(false.into()))),
        loop_step: helper.next_expr(Expr::Ident(var.clone())),
        result: body,
    };
    Ok(Some(helper.next_expr(Expr::Comprehension(Box::new(bind)))))
}

fn build_env() -> Env {
    let mut env = Env::stdlib();
    let declared = declare(&mut env);
    if let Err(e) = declared {
        // Only a programming error (a clashing overload) gets here; selectors then fail to
        // compile or evaluate with an error, never match silently.
        tracing::error!(error = %e, "building the DRA CEL environment");
    }
    env
}

fn declare(env: &mut Env) -> Result<(), cel::DeclarationError> {
    use types::{INT_TYPE, STRING_TYPE};
    env.add_extension(cel::extensions::strings)?;
    env.add_macro(Macro::receiver("bind", 3, bind_macro))?;
    let q = QUANTITY_TYPE.to_owned();
    let s = SEMVER_TYPE.to_owned();
    env.add_type(q.to_owned())?;
    env.add_type(s.to_owned())?;
    env.add_overload("quantity", "quantity_string", vec![STRING_TYPE], f_quantity)?;
    env.add_overload(
        "isQuantity",
        "isQuantity_string",
        vec![STRING_TYPE],
        f_is_quantity,
    )?;
    env.add_member_overload(
        "compareTo",
        "quantity_compareTo",
        q.to_owned(),
        vec![q.to_owned()],
        f_quantity_compare_to,
    )?;
    env.add_member_overload(
        "isGreaterThan",
        "quantity_isGreaterThan",
        q.to_owned(),
        vec![q.to_owned()],
        f_quantity_greater,
    )?;
    env.add_member_overload(
        "isLessThan",
        "quantity_isLessThan",
        q.to_owned(),
        vec![q.to_owned()],
        f_quantity_less,
    )?;
    env.add_member_overload(
        "isInteger",
        "quantity_isInteger",
        q.to_owned(),
        vec![],
        f_quantity_is_integer,
    )?;
    env.add_member_overload(
        "asInteger",
        "quantity_asInteger",
        q.to_owned(),
        vec![],
        f_quantity_as_integer,
    )?;
    env.add_member_overload(
        "asApproximateFloat",
        "quantity_asFloat",
        q.to_owned(),
        vec![],
        f_quantity_as_float,
    )?;
    env.add_member_overload(
        "sign",
        "quantity_sign",
        q.to_owned(),
        vec![],
        f_quantity_sign,
    )?;
    env.add_member_overload(
        "add",
        "quantity_add_quantity",
        q.to_owned(),
        vec![q.to_owned()],
        f_quantity_add,
    )?;
    env.add_member_overload(
        "add",
        "quantity_add_int",
        q.to_owned(),
        vec![INT_TYPE],
        f_quantity_add,
    )?;
    env.add_member_overload(
        "sub",
        "quantity_sub_quantity",
        q.to_owned(),
        vec![q.to_owned()],
        f_quantity_sub,
    )?;
    env.add_member_overload(
        "sub",
        "quantity_sub_int",
        q.to_owned(),
        vec![INT_TYPE],
        f_quantity_sub,
    )?;
    env.add_overload("semver", "semver_string", vec![STRING_TYPE], f_semver)?;
    env.add_overload(
        "isSemver",
        "isSemver_string",
        vec![STRING_TYPE],
        f_is_semver,
    )?;
    env.add_member_overload(
        "compareTo",
        "semver_compareTo",
        s.to_owned(),
        vec![s.to_owned()],
        f_semver_compare_to,
    )?;
    env.add_member_overload(
        "isGreaterThan",
        "semver_isGreaterThan",
        s.to_owned(),
        vec![s.to_owned()],
        f_semver_greater,
    )?;
    env.add_member_overload(
        "isLessThan",
        "semver_isLessThan",
        s.to_owned(),
        vec![s.to_owned()],
        f_semver_less,
    )?;
    env.add_member_overload(
        "major",
        "semver_major",
        s.to_owned(),
        vec![],
        f_semver_major,
    )?;
    env.add_member_overload(
        "minor",
        "semver_minor",
        s.to_owned(),
        vec![],
        f_semver_minor,
    )?;
    env.add_member_overload("patch", "semver_patch", s, vec![], f_semver_patch)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity as K8sQuantity;

    const DRIVER: &str = "gpu.example.com";

    fn attrs() -> BTreeMap<String, DeviceAttribute> {
        let mut m = BTreeMap::new();
        m.insert(
            "model".to_string(),
            DeviceAttribute {
                string: Some("a100".into()),
                ..Default::default()
            },
        );
        m.insert(
            "gpu.example.com/count".to_string(),
            DeviceAttribute {
                int: Some(4),
                ..Default::default()
            },
        );
        m.insert(
            "driverVersion".to_string(),
            DeviceAttribute {
                version: Some("1.10.2".into()),
                ..Default::default()
            },
        );
        m.insert(
            "numa.example.com/local".to_string(),
            DeviceAttribute {
                bool: Some(true),
                ..Default::default()
            },
        );
        m
    }

    fn capacity() -> BTreeMap<String, DeviceCapacity> {
        let mut m = BTreeMap::new();
        m.insert(
            "memory".to_string(),
            DeviceCapacity {
                value: K8sQuantity("40Gi".into()),
                ..Default::default()
            },
        );
        m
    }

    fn eval(expr: &str) -> Result<bool, String> {
        let (a, c) = (attrs(), capacity());
        let device = DeviceInput {
            driver: DRIVER,
            allow_multiple_allocations: false,
            attributes: Some(&a),
            capacity: Some(&c),
        };
        compile(expr)?.matches(&device)
    }

    #[test]
    fn selectors_see_the_device_as_upstream() {
        let cases = [
            (r#"device.driver == "gpu.example.com""#, true),
            (r#"device.driver == "other""#, false),
            (
                r#"device.attributes["gpu.example.com"].model == "a100""#,
                true,
            ),
            (r#"device.attributes["gpu.example.com"].count > 2"#, true),
            (r#"device.attributes["numa.example.com"].local"#, true),
            (
                r#"device.attributes["gpu.example.com"]["model"] == "h100""#,
                false,
            ),
            (r#""model" in device.attributes["gpu.example.com"]"#, true),
            (
                r#""model" in device.attributes["other.example.com"]"#,
                false,
            ),
            (r#"has(device.attributes["gpu.example.com"].model)"#, true),
            (
                r#"has(device.attributes["other.example.com"].model)"#,
                false,
            ),
            (r#"!device.allowMultipleAllocations"#, true),
            (
                r#"device.capacity["gpu.example.com"].memory.compareTo(quantity("40Gi")) == 0"#,
                true,
            ),
            (
                r#"device.capacity["gpu.example.com"].memory.isGreaterThan(quantity("32Gi"))"#,
                true,
            ),
            (
                r#"device.capacity["gpu.example.com"].memory.isLessThan(quantity("32Gi"))"#,
                false,
            ),
            (
                r#"device.capacity["gpu.example.com"].memory == quantity("40960Mi")"#,
                true,
            ),
            (r#"quantity("1.5").isInteger()"#, false),
            (r#"quantity("2k").asInteger() == 2000"#, true),
            (
                r#"quantity("1Gi").add(quantity("1Gi")) == quantity("2Gi")"#,
                true,
            ),
            (r#"quantity("3").sub(1).sign() == 1"#, true),
            (r#"isQuantity("10Zi")"#, false),
            (
                r#"device.attributes["gpu.example.com"].driverVersion.isGreaterThan(semver("1.9.0"))"#,
                true,
            ),
            (
                r#"device.attributes["gpu.example.com"].driverVersion.compareTo(semver("1.10.2")) == 0"#,
                true,
            ),
            (
                r#"device.attributes["gpu.example.com"].driverVersion.major() == 1"#,
                true,
            ),
            (
                r#"device.attributes["gpu.example.com"].driverVersion.minor() == 10"#,
                true,
            ),
            (r#"semver("2.0.0-rc.1").isLessThan(semver("2.0.0"))"#, true),
            (r#"isSemver("v1.0")"#, false),
            (
                r#"cel.bind(dra, device.attributes["gpu.example.com"], dra.model == "a100" && dra.count == 4)"#,
                true,
            ),
            (
                r#"["h100", "a100"].exists(m, m == device.attributes["gpu.example.com"].model)"#,
                true,
            ),
            (
                r#"device.attributes["gpu.example.com"].model.upperAscii() == "A100""#,
                true,
            ),
            (
                r#"device.attributes["gpu.example.com"].model.startsWith("a1")"#,
                true,
            ),
            (
                r#"device.attributes["gpu.example.com"].model.matches("^[ah][0-9]+$")"#,
                true,
            ),
            (r#"size(device.attributes["gpu.example.com"]) == 3"#, true),
        ];
        for (expr, want) in cases {
            assert_eq!(eval(expr), Ok(want), "{expr}");
        }
    }

    #[test]
    fn failures_are_errors_never_silent_mismatches() {
        let cases = [
            // A missing attribute in a known domain is a runtime error, as upstream.
            (
                r#"device.attributes["gpu.example.com"].vendor == "x""#,
                "vendor",
            ),
            // Not a bool.
            (r#"device.driver"#, "must evaluate to bool"),
            // Functions ksched does not implement are refused when compiling.
            (
                r#"ip("10.0.0.1").family() == 4"#,
                "not supported by ksched: family, ip",
            ),
            (
                r#"url("https://x").getHost() == "x""#,
                "not supported by ksched",
            ),
            // Syntax.
            (r#"device.driver =="#, "compilation failed"),
            // Undeclared variables.
            (r#"node.name == "a""#, "node"),
            (r#"quantity("not a quantity").sign() == 0"#, "quantity"),
        ];
        for (expr, want) in cases {
            match eval(expr) {
                Err(e) => assert!(e.contains(want), "{expr}: {e}"),
                Ok(v) => panic!("{expr}: evaluated to {v}"),
            }
        }
    }

    #[test]
    fn the_cache_compiles_once() {
        let cache = Cache::default();
        let a = cache.get_or_compile("device.driver == 'x'");
        let b = cache.get_or_compile("device.driver == 'x'");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(cache.get_or_compile("(").is_err());
    }
}
