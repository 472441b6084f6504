//! Golden rows for the pushes (request id 0). Split from `mod.rs` only to keep the table
//! readable; same helpers, same rules.

use super::*;

/// Push samples (request id 0).
pub fn push_cases() -> Vec<Golden> {
    vec![
        // ---- pushes (request id 0) ----
        golden(
            "output",
            push(Push::Output(Output {
                pty: pty(7),
                offset: 300,
                data: b"hi\r\n".to_vec(),
            })),
            "00 818001 11 ef9bafcdf8acd1910107 ac02 0468690d0a",
        ),
        golden(
            "output_gap",
            push(Push::OutputGap(OutputGap {
                pty: pty(7),
                from: 300,
                to: 1024,
            })),
            "00 828001 0e ef9bafcdf8acd1910107 ac02 8008",
        ),
        golden(
            "exited",
            push(Push::Exited(Exited {
                binding: binding(),
                exit: ExitStatus {
                    code: 0,
                    signal: None,
                },
                reason: EndReason::Exited,
                event_key: 4096,
            })),
            concat!(
                "00 838001 19 03617069027431026c32ef9bafcdf8acd1910107 00 00 ",
                "00 8020",
            ),
        ),
        golden(
            "exited_killed",
            push(Push::Exited(Exited {
                binding: binding(),
                exit: ExitStatus {
                    code: 1,
                    signal: Some("Killed".into()),
                },
                reason: EndReason::Killed,
                event_key: 4096,
            })),
            concat!(
                "00 838001 20 03617069027431026c32ef9bafcdf8acd1910107 01 ",
                "01064b696c6c6564 01 8020",
            ),
        ),
        golden(
            "snapshot",
            push(Push::Snapshot(Snapshot {
                pty: pty(7),
                offset: 5000,
                size: size(),
                data: b"\x1b[Hhi".to_vec(),
                last: true,
            })),
            "00 848001 16 ef9bafcdf8acd1910107 8827 c80132 051b5b486869 01",
        ),
        golden(
            "event_bell",
            push(Push::Event(Event {
                pty: pty(7),
                key: 1,
                offset: 300,
                event: ScreenEvent::Bell,
            })),
            "00 858001 0e ef9bafcdf8acd1910107 01 ac02 00",
        ),
        golden(
            "event_title",
            push(Push::Event(Event {
                pty: pty(7),
                key: 2,
                offset: 300,
                event: ScreenEvent::Title("vim".into()),
            })),
            "00 858001 12 ef9bafcdf8acd1910107 02 ac02 01 0376696d",
        ),
        golden(
            "event_cwd",
            push(Push::Event(Event {
                pty: pty(7),
                key: 3,
                offset: 301,
                event: ScreenEvent::Cwd("file://h/tmp".into()),
            })),
            "00 858001 1b ef9bafcdf8acd1910107 03 ad02 02 0c66696c653a2f2f682f746d70",
        ),
        golden(
            "event_command_finished",
            push(Push::Event(Event {
                pty: pty(7),
                key: 4,
                offset: 302,
                event: ScreenEvent::CommandFinished {
                    exit_code: Some(-1),
                },
            })),
            "00 858001 10 ef9bafcdf8acd1910107 04 ae02 03 0101",
        ),
        golden(
            "event_command_finished_no_code",
            push(Push::Event(Event {
                pty: pty(7),
                key: 5,
                offset: 302,
                event: ScreenEvent::CommandFinished { exit_code: None },
            })),
            "00 858001 0f ef9bafcdf8acd1910107 05 ae02 03 00",
        ),
    ]
}
