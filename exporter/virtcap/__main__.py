from virtcap.commands import run

run()
