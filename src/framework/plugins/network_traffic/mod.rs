//! NetworkTraffic (the Prometheus-scored plugin of seed 003) — built in a later issue; for now its
//! args. The seed names the fields `ip`, `deviceName`, `timeRange`; the later published version
//! `prometheusAddress`, `networkInterface`, `timeRangeInSeconds`. Both spellings decode (not both
//! at once); the normalized form uses the seed's.

use serde::{Deserialize, Serialize};

use crate::config::FieldError;
use crate::framework::args::{PluginArgs, invalid, required};

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct NetworkTrafficArgs {
    /// The Prometheus server address.
    #[serde(alias = "prometheusAddress")]
    pub ip: String,
    /// The network interface to measure.
    #[serde(rename = "deviceName", alias = "networkInterface")]
    pub device_name: String,
    /// The measurement window in seconds.
    #[serde(rename = "timeRange", alias = "timeRangeInSeconds")]
    pub time_range: i64,
}

impl PluginArgs for NetworkTrafficArgs {
    const KIND: &'static str = "NetworkTrafficArgs";

    fn validate(&self) -> Vec<FieldError> {
        let mut errs = Vec::new();
        if self.ip.is_empty() {
            errs.push(required("ip", "the Prometheus address is needed"));
        }
        if self.time_range < 0 {
            errs.push(invalid(
                "timeRange",
                self.time_range,
                "must be greater than or equal to 0",
            ));
        }
        errs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::framework::args::decode;
    use serde_json::json;

    #[test]
    fn both_spellings() {
        let want = json!({"ip": "http://10.0.0.4:9090", "deviceName": "eth0", "timeRange": 60});
        assert_eq!(decode::<NetworkTrafficArgs>(Some(&want)), Ok(want.clone()));
        let published = json!({"prometheusAddress": "http://10.0.0.4:9090", "networkInterface": "eth0", "timeRangeInSeconds": 60});
        assert_eq!(decode::<NetworkTrafficArgs>(Some(&published)), Ok(want));
        assert!(decode::<NetworkTrafficArgs>(Some(&json!({"ip": "x", "address": "y"}))).is_err());
        assert_eq!(
            decode::<NetworkTrafficArgs>(None).unwrap_err()[0].path,
            "ip"
        );
    }
}
