//! Starting an app: each included subscriber is checked and planned (its
//! consumer name, its group), its group prepared, and its task spawned,
//! with the app's own tasks (the group gauges).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ruststream_core::{Broker, Counts, EntryId, NameKind, ReadMode, check_name};
use tokio::sync::watch;

use super::{BrokerSetup, INSTANCE_VAR, Included, Runner, RustStream, StartError};
use crate::admin;
use crate::group_poll::{self, PolledGroup};
use crate::metrics::GroupGauges;
use crate::running::{AppView, Running, RunningSubscription};
use crate::runtime::{Counters, Env, LastRead};
use crate::{Publisher, ReplyTarget, SubscriberInfo, Subscription};

static NEXT_CONSUMER: AtomicUsize = AtomicUsize::new(0);

impl RustStream {
    /// Validates every subscription, creates the groups and starts reading.
    ///
    /// Nothing is read unless every subscription can be served: a missing
    /// group name, bad options, or a read mode the broker cannot serve stop
    /// the start with an error naming the subscriber.
    pub async fn start(self) -> Result<Running, StartError> {
        let instance = self
            .instance
            .clone()
            .or_else(|| std::env::var(INSTANCE_VAR).ok())
            .filter(|name| !name.is_empty());
        let mut plans = Vec::new();
        for setup in &self.brokers {
            for included in &setup.subscribers {
                let plan = Plan::new(setup, included, instance.as_deref())?;
                setup
                    .broker
                    .check_mode(plan.subscription.stream.read_mode())
                    .await
                    .map_err(|source| StartError::Unsupported {
                        subscriber: plan.describe(),
                        source,
                    })?;
                plans.push(plan);
            }
        }
        if self.admin.is_none() && self.admin_token.is_some() {
            tracing::warn!("admin_token without admin(addr): no endpoint to protect");
        }
        let admin = match &self.admin_options() {
            Some(options) => {
                // Before any metrics handle is registered: handles made
                // without a recorder record nothing, ever.
                if let Err(message) = admin::prometheus() {
                    tracing::warn!(message, "the admin endpoint serves no metrics");
                }
                let listener = admin::bind(options)
                    .await
                    .map_err(|source| StartError::Admin {
                        addr: options.addr,
                        source,
                    })?;
                Some((listener, options.token.clone()))
            }
            None => None,
        };
        let mut floors = Vec::with_capacity(plans.len());
        for plan in &plans {
            floors.push(plan.prepare_group().await?);
        }
        // Nothing below fails.
        let consumers = consumers(&plans, instance.as_deref());
        crate::metrics::describe();
        let (signal, watch) = watch::channel(None);
        let mut tasks = Vec::new();
        let mut polled: Vec<PolledGroup> = Vec::new();
        // One per group of the app, indexed like `plans`.
        let mut last_reads: Vec<Arc<LastRead>> = Vec::with_capacity(plans.len());
        for (i, plan) in plans.iter().enumerate() {
            let first = plans[..i].iter().position(|p| p.same_group(plan));
            let last_read = match first {
                Some(first) => Arc::clone(&last_reads[first]),
                None => {
                    let (stream, group) = (plan.subscription.stream.stream_name(), plan.group());
                    polled.push(PolledGroup {
                        broker: Arc::clone(&plan.broker),
                        stream: stream.to_owned(),
                        group: group.to_owned(),
                        gauges: GroupGauges::new(self.info.name(), stream, group),
                    });
                    // Where the group stands once all its plans were
                    // prepared: the last one's floor (a later plan's
                    // `start_at` may have moved the cursor either way).
                    let floor = plans
                        .iter()
                        .zip(&floors)
                        .rev()
                        .find(|(p, _)| p.same_group(plan))
                        .map_or(EntryId::ZERO, |(_, floor)| *floor);
                    Arc::new(LastRead::new(floor))
                }
            };
            last_reads.push(last_read);
        }
        if self.group_metrics || self.admin.is_some() {
            tasks.push(tokio::spawn(group_poll::poll_groups(polled, watch.clone())));
        }
        // For each plan, the shortest `min_idle` of its group's claiming
        // and reclaim plans (its own included).
        let claimed_after: Vec<Option<Duration>> = plans
            .iter()
            .map(|plan| {
                plans
                    .iter()
                    .filter(|other| other.same_group(plan))
                    .filter_map(|other| match other.subscription.stream.read_mode() {
                        ReadMode::Claiming { min_idle } | ReadMode::Reclaim { min_idle } => {
                            Some(min_idle)
                        }
                        ReadMode::New | ReadMode::OwnPending { .. } => None,
                    })
                    .min()
            })
            .collect();
        let mut subscriptions = Vec::new();
        for (((plan, last_read), claimed_after), consumer) in plans
            .into_iter()
            .zip(last_reads)
            .zip(claimed_after)
            .zip(consumers)
        {
            let labels = crate::metrics::subscription_labels(
                self.info.name(),
                plan.info.name,
                plan.subscription.stream.stream_name(),
                plan.group(),
            );
            let counters = Arc::new(Counters::new(crate::metrics::SubscriptionMetrics::new(
                &labels,
            )));
            let env = Env {
                broker: Arc::clone(&plan.broker),
                publisher: Publisher::new(Arc::clone(&plan.broker)).for_app(self.info.name()),
                consumer: consumer.clone(),
                name: plan.info.name,
                subscription: plan.subscription.clone(),
                reply: plan.reply.clone(),
                shutdown: watch.clone(),
                counters: Arc::clone(&counters),
                observer: self.observer.clone(),
                last_read,
                keep_alive: self.keep_alive,
                claimed_after,
                prune_idle_consumers: self.prune_idle_consumers,
                readiness: self.readiness,
            };
            tracing::info!(
                subscriber = plan.info.name,
                stream = plan.subscription.stream.stream_name(),
                group = plan.group(),
                consumer = %consumer,
                workers = plan.subscription.workers,
                replies = plan.runner.replies(),
                "subscriber started"
            );
            tasks.push(Arc::clone(&plan.runner).spawn(env));
            subscriptions.push(RunningSubscription {
                info: plan.info,
                subscription: plan.subscription,
                consumer,
                broker: plan.broker,
                counters,
            });
        }
        let publisher = self
            .brokers
            .first()
            .map(|b| Publisher::new(Arc::clone(&b.broker)).for_app(self.info.name()));
        let view = Arc::new(AppView {
            info: self.info,
            subscriptions,
            brokers: self.brokers.iter().map(|b| Arc::clone(&b.broker)).collect(),
            readiness: self.readiness,
        });
        let mut admin_addr = None;
        if let Some((listener, token)) = admin {
            admin_addr = listener.local_addr().ok();
            tracing::info!(addr = ?admin_addr, writes = token.is_some(), "admin endpoint listening");
            let state = admin::AdminState {
                view: Arc::clone(&view),
                token,
            };
            tasks.push(admin::serve(listener, state, watch.clone()));
        }
        Ok(Running {
            view,
            signal,
            tasks,
            publisher,
            shutdown_deadline: self.shutdown_deadline,
            admin_addr,
        })
    }
}

/// A subscriber ready to start.
struct Plan {
    broker: Arc<dyn Broker>,
    runner: Arc<dyn Runner>,
    info: SubscriberInfo,
    subscription: Subscription,
    reply: ReplyTarget,
    /// The consumer name the subscription sets; `None`: one is generated.
    consumer: Option<String>,
}

/// The consumer name generated for the `n`th subscription without one of
/// the process's starts. Numbers are taken only once a start can no longer
/// fail: a start retried in the same process (its broker was not up yet)
/// reads under the names the first attempt would have, those a restarted
/// process reads under too, and so takes back what its predecessor held.
fn generated_consumer(instance: Option<&str>, n: usize) -> String {
    match instance {
        Some(instance) => format!("{instance}-ruststream-{n}"),
        None => format!("ruststream-{n}"),
    }
}

/// The consumer name of each plan: its own, or a generated one, numbered
/// in plan order (see [`generated_consumer`]).
fn consumers(plans: &[Plan], instance: Option<&str>) -> Vec<String> {
    let unnamed = plans.iter().filter(|p| p.consumer.is_none()).count();
    let mut next = NEXT_CONSUMER.fetch_add(unnamed, Ordering::Relaxed);
    plans
        .iter()
        .map(|plan| {
            plan.consumer.clone().unwrap_or_else(|| {
                next += 1;
                generated_consumer(instance, next - 1)
            })
        })
        .collect()
}

impl Plan {
    fn new(
        setup: &BrokerSetup,
        included: &Included,
        instance: Option<&str>,
    ) -> Result<Self, StartError> {
        let info = included.runner.info();
        let subscription = included.runner.subscription();
        let invalid = |detail: String| StartError::Invalid {
            subscriber: describe(&info, &subscription),
            detail,
        };
        let Some(group) = subscription.stream.group_name() else {
            return Err(invalid(
                "it names no consumer group: add .group(\"name\") to its stream descriptor".into(),
            ));
        };
        // The names' rules live in one place, the core; every broker checks
        // them again on each call.
        let names = check_name(NameKind::Stream, subscription.stream.stream_name())
            .and_then(|()| check_name(NameKind::Group, group))
            .and_then(|()| {
                subscription
                    .stream
                    .consumer_name()
                    .map_or(Ok(()), |c| check_name(NameKind::Consumer, c))
            });
        if let Err(error) = names {
            return Err(invalid(error.to_string()));
        }
        if let ReplyTarget::Stream(stream) = &included.reply
            && let Err(error) = check_name(NameKind::Stream, stream)
        {
            return Err(invalid(format!("its replies go to a bad stream: {error}")));
        }
        // The counts' rules live in the core, where the macro applies them
        // to literals at compile time.
        let counts = Counts {
            workers: subscription.workers as u64,
            prefetch: subscription.prefetch.map(|p| p as u64),
            max_deliveries: subscription.max_deliveries.map(u64::from),
        };
        if let Err(detail) = counts.validate() {
            return Err(invalid(detail));
        }
        if let Some(detail) = batch_conflict(&subscription) {
            return Err(invalid(detail));
        }
        let consumer = match subscription.stream.consumer_name() {
            Some(name) => Some(name.to_owned()),
            None => {
                // Numbered once the start can no longer fail (see
                // `generated_consumer`); the number does not change
                // whether the name is valid.
                if let Err(error) = check_name(NameKind::Consumer, &generated_consumer(instance, 0))
                {
                    return Err(invalid(format!(
                        "the instance name makes a bad consumer name: {error}"
                    )));
                }
                None
            }
        };
        Ok(Plan {
            broker: Arc::clone(&setup.broker),
            runner: Arc::clone(&included.runner),
            info,
            subscription,
            reply: included.reply.clone(),
            consumer,
        })
    }

    fn group(&self) -> &str {
        self.subscription.stream.group_name().unwrap_or_default()
    }

    fn describe(&self) -> String {
        describe(&self.info, &self.subscription)
    }

    /// Whether `other` reads the same group: the same broker (the same
    /// `Arc`, see [`RustStream::with_shared_broker`]), stream and group.
    fn same_group(&self, other: &Plan) -> bool {
        Arc::ptr_eq(&self.broker, &other.broker)
            && self.subscription.stream.stream_name() == other.subscription.stream.stream_name()
            && self.group() == other.group()
    }

    /// Creates the group if needed, moves its cursor if asked, and returns
    /// the group's last delivered id: the point a group lost later (a
    /// server restart) is recreated from, until the app's subscriptions of
    /// it read past it (the last of them prepared gives the group's
    /// position, see [`LastRead`]).
    async fn prepare_group(&self) -> Result<EntryId, StartError> {
        let stream = self.subscription.stream.stream_name();
        let failed = |source| StartError::Broker {
            subscriber: self.describe(),
            source,
        };
        let created = self
            .broker
            .ensure_group(stream, self.group(), self.subscription.stream.start())
            .await
            .map_err(failed)?;
        if created {
            tracing::info!(stream, group = self.group(), "consumer group created");
        }
        if let Some(position) = self.subscription.stream.moved_to() {
            self.broker
                .set_group_position(stream, self.group(), position)
                .await
                .map_err(failed)?;
            tracing::info!(
                stream,
                group = self.group(),
                ?position,
                "group cursor moved (start_at)"
            );
        }
        let info = self
            .broker
            .group_info(stream, self.group())
            .await
            .map_err(failed)?;
        Ok(info.last_delivered)
    }
}

fn describe(info: &SubscriberInfo, subscription: &Subscription) -> String {
    format!(
        "subscriber `{}` ({}:{}, stream {:?}, group {:?})",
        info.name,
        info.file,
        info.line,
        subscription.stream.stream_name(),
        subscription.stream.group_name().unwrap_or("<none>"),
    )
}

/// What a subscription's `batch(..)` cannot be combined with (the macro
/// refuses the same at compile time; a hand-built `Subscription` is checked
/// here): `by_key` lanes, and a `prefetch` under one batch.
fn batch_conflict(subscription: &Subscription) -> Option<String> {
    let batch = subscription.batch?;
    if batch.max == 0 {
        return Some("`batch(max = 0)`: a batch holds at least one entry".into());
    }
    if subscription.by_key {
        return Some(ruststream_core::BATCH_WITH_BY_KEY.into());
    }
    let prefetch = subscription.prefetch?;
    ruststream_core::check_prefetch_covers_batch(prefetch as u64, batch.max as u64).err()
}
