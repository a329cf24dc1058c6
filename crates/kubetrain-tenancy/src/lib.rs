#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod check;
pub mod policy;
pub mod risk;
pub mod team;
