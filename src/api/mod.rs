pub mod scheduler_profile;
