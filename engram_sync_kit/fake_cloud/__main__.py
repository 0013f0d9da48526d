from engram_sync_kit.fake_cloud.cli import main

main()
