from virtcap.cli import run

run()
